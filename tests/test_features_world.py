"""The serving features of issue 12 run in the world (the bundled example of each), and each
moves what it should: MTP cuts time per output token, NVLink P->D transfers beat RDMA inside a
node, skewed expert popularity slows MoE steps, pipeline stages and heterogeneous groups
carry their own GPUs and hardware, fixed P/D overheads add to TTFT."""
from __future__ import annotations

import pdsim


def _run(key: str, *sets: str):
    return pdsim.simulate(pdsim.load_scenario(key, list(sets)))


def test_mtp_cuts_time_per_output_token():
    light = ("workload.num_requests=60", "workload.rate=0.5")
    mtp = _run("dsr1-h20-mtp", *light).summary()
    plain = _run("dsr1-h20-mtp", *light, "cluster.decode.engine.speculative=null").summary()
    assert mtp["mean_tpot_ms"] < 0.8 * plain["mean_tpot_ms"]
    assert mtp["completed"] == plain["completed"] == 60


def test_nvlink_transfer_beats_rdma_in_one_node():
    nv = _run("qwen3-h20-nvlink-pd", "workload.num_requests=40").requests
    rd = _run("qwen3-h20-nvlink-pd", "workload.num_requests=40", "transfer.link=rdma").requests
    assert nv["transfer_s"].mean() < rd["transfer_s"].mean()


def test_skewed_experts_slow_moe_steps():
    few = ("workload.num_requests=300", "workload.expert_load.eplb=false")  # EPLB would flatten the skew
    skew = _run("dsv3-h800-skewed-experts", *few).summary()
    flat = _run("dsv3-h800-skewed-experts", *few, "workload.expert_load.skew=0").summary()
    assert skew["mean_itl_ms"] > flat["mean_itl_ms"]


def test_pipeline_instance_spans_its_stages():
    res = _run("llama70b-a100-pp2", "workload.num_requests=50")
    assert res.record.instances[0].gpus == 16 and res.requests["finished"].all()


def test_heterogeneous_groups_and_fixed_overheads():
    res = _run("dsv3-h800p-h20d", "workload.num_requests=50")
    assert res.requests["finished"].all()
    assert res.scenario.hardware_of("decode", 0).name == "h20"
    none = _run("dsv3-h800p-h20d", "workload.num_requests=50", "overheads=null").requests
    # router in and out (1 ms each) plus the bootstrap handshake: TTFT grows by at least 2 ms
    assert (res.requests["ttft_s"] - none["ttft_s"]).min() > 0.002 - 1e-9
