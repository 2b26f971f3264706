"""Issue 12: the qualitative behaviour of each corrected price mechanism, against the public
figures it was built from."""
from __future__ import annotations

import dataclasses

import pytest

from pdsim.costs import build_step_cost
from pdsim.costs.comm import allreduce_s, deepep_legs, deepep_reported_bytes
from pdsim.costs.compute import gemm_s
from pdsim.costs.deepep import ELEM_BYTES, normal_time_s
from pdsim.costs.moe_load import expert_load, popularity
from pdsim.costs.transfer import flow_cap, kv_chunks, transfer_plan
from pdsim.specs import catalog
from pdsim.specs.features import ExpertLoadSpec
from pdsim.specs.hf_config import load_hf_config
from pdsim.specs.memory import deepep_low_latency_bytes, instance_memory, runtime_bytes
from pdsim.specs.scenario import EngineSpec, GroupSpec, TransferSpec

DSV3 = catalog.load_model_ref("deepseek-v3")
LLAMA = catalog.load_model_ref("llama-3.1-8b")
H800, H100, H20 = (catalog.load_hardware_ref(k) for k in ("h800", "h100", "h20"))
LLAMA70 = load_hf_config(catalog.models_dir() / "hf" / "llama-3.1-70b" / "config.json")


def _ep72(tbo: bool) -> GroupSpec:
    return GroupSpec(nodes=9, dp=72, ep=72, enable_dp_attention=True,
                     engine=EngineSpec(ep_num_redundant_experts=32, deepep_mode="low_latency", enable_two_batch_overlap=tbo))


# -- 1. KV transfer granularity ------------------------------------------------------------------
def test_page_1_transfer_is_far_slower_than_page_64():
    """DeepSeek-V3 4K-token prompt through the batched Mooncake engine: page 1 posts 64x the
    work requests of page 64, so its transfer takes many times longer (it took the same ~2.5 ms
    before chunks were priced)."""
    spec = TransferSpec(backend="mooncake", batched=True)

    def seconds(page):
        plan = transfer_plan(DSV3, H800, spec, 4096, 1, page, calibrated=True)
        return plan.fixed_s + plan.nbytes / flow_cap(H800, plan.senders, 16, None, "mooncake", True), plan.chunks
    t1, c1 = seconds(1)
    t64, c64 = seconds(64)
    assert c1 == 4096 * 61 and c64 == 64 * 61
    assert t1 > 20 * t64
    # contiguous runs of pages (a fresh pool) collapse the chunks again
    assert kv_chunks(DSV3, 4096, 1, run_pages=64) == c64


def test_gqa_chunks_split_into_k_and_v_and_over_larger_decode_tp():
    assert kv_chunks(LLAMA, 1024, 16) == 64 * 32 * 2
    assert kv_chunks(LLAMA, 1024, 16, attn_tp=1, dst_attn_tp=4) == 4 * kv_chunks(LLAMA, 1024, 16)


def test_same_node_transfer_goes_over_nvlink():
    """P and D on one node: the copy runs at NVLink speed, not the NIC share."""
    spec = TransferSpec(backend="mooncake")
    rdma = flow_cap(H20, 4, 4, None, "mooncake", calibrated=False)
    nvl = flow_cap(H20, 4, 4, None, "mooncake", calibrated=False, link="nvlink")
    assert nvl > 10 * rdma
    plan = transfer_plan(LLAMA, H20, spec, 4096, 4, 64, link="nvlink")
    assert plan.link == "nvlink" and plan.fixed_s < transfer_plan(LLAMA, H20, spec, 4096, 4, 64, calibrated=True).fixed_s


def test_heterogeneous_transfer_is_capped_by_the_slower_end():
    h800_cap = flow_cap(H800, 8, 8, None, "nccl")
    both = flow_cap(H800, 8, 8, None, "nccl", dst_hw=H20)
    assert both == pytest.approx(min(h800_cap, flow_cap(H20, 8, 8, None, "nccl")))
    assert both < h800_cap  # H20 nodes have half the NIC bandwidth per GPU


# -- 2. GEMM efficiency from each GPU's own balance ---------------------------------------------
@pytest.mark.parametrize("kind", ["roofline", "calibrated"])
def test_h20_small_batch_decode_is_memory_bound(kind):
    """BF16 Llama-3.1-8B decode on one H20 at batch 8: the GEMMs cost about their weight reads
    (H20's ridge point is 37 FLOP/byte in BF16); with the H100's small-batch constants copied
    they cost several times more."""
    g = GroupSpec(gpus=1)
    c = build_step_cost(kind, H20, LLAMA, g, "decode")
    b = c.breakdown(0, 0, 0, 8, 8 * 2000.0)
    weights = LLAMA.num_layers * (LLAMA.attn_params + LLAMA.dense_mlp_params) * 2
    hbm = H20.gpu.hbm_gbps * 1e9
    small = LLAMA.num_layers * (c.c_ew[0] + c.c_ew[2] + (c.c_ew[1] + c.c_ew[3]) * 8)  # norms, activation (elementwise.py)
    assert b["attn_proj"] + b["mlp"] - small < 1.4 * weights / hbm


def test_h20_fp8_small_batch_gemm_no_longer_carries_h100_constants():
    """An 8-row FP8 block-scaled GEMM on H20: the H100's copied constants (eff 0.57 with a
    103-token half-efficiency point) priced it at 5x its weight reads; now it pays the 64-row
    WGMMA tile at Hopper's fraction of the H20's own peak (~3x: the waste DeepGEMM's swapAB
    removes, LMSYS 2025-09-26)."""
    n, k, m = 7168, 2048, 8
    fl, nb, mem = 2.0 * m * n * k, float(n * k), n * k / 4e12
    old = 1e-6 * 0 + (fl * (m + 102.9) / (m * 296e12 * 0.5735))  # the pre-issue-12 form and H100 constants
    p = H20.calibration["gemm_fp8_block"]
    new = gemm_s(m, fl, nb, 296e12, 4e12, p["eff"], p["m_tile"], p["hbm_eff"], 0.0, p["sharp"])
    assert old / mem > 5 and new / mem < 3.5 and new < 0.7 * old


def test_gemm_turns_compute_bound_at_each_gpus_own_ridge_point():
    """The same BF16 GEMM (N = K = 4096): memory-bound on both GPUs at 8 rows, compute-bound on
    the H20 from ~40 rows while the H100 stays memory-bound to ~300 rows."""
    def ratio(hw, m):
        p = hw.calibration["gemm_bf16"]
        n = k = 4096
        t = gemm_s(m, 2.0 * m * n * k, n * k * 2.0, hw.gpu.peak_flops("bf16"), hw.gpu.hbm_gbps * 1e9, p["eff"], p["m_tile"],
                   p["hbm_eff"], 0.0, p["sharp"])
        return t / (n * k * 2.0 / (hw.gpu.hbm_gbps * 1e9))  # time over the weight-read time at full bandwidth
    assert ratio(H20, 8) < 1.3 and ratio(H100, 8) < 1.3
    assert ratio(H20, 128) > 2.5 and ratio(H100, 128) < 1.3


def test_h20_deepseek_decode_step_near_published_figure():
    """DeepSeek-R1 decode on two H20 nodes (DP16 + EP16, MTP, FP8 KV), batch 8 per GPU: SGLang
    measured 53 ms per step (LMSYS 2025-09-26); the issue found the old prices ~6x off."""
    from pdsim.calibrate.step_report import step_comparison

    df = step_comparison()
    h20 = df[(df["hardware"] == "h20") & df["config"].str.contains(" 8 seq/rank") & df["config"].str.contains("EP16")]
    assert len(h20) == 1 and abs(h20["error"].iloc[0]) < 0.35


# -- 3. two-batch overlap ---------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["roofline", "calibrated"])
def test_tbo_loses_at_small_batch_and_wins_at_large(kind):
    """SGLang, DeepSeek-V3 decode EP72 on H100 (LMSYS 2025-05-05): TBO -27% at 32 tokens per
    device, +25.5% at 256: splitting pays weight reads and latencies twice, and only large
    batches have communication worth hiding."""
    def step(tbo, per_gpu):
        c = build_step_cost(kind, H100, DSV3, _ep72(tbo), "decode")
        b = per_gpu * 72
        return c.step_time(0, 0.0, 0, b, b * 2000.0)
    assert step(True, 8) > step(False, 8)
    assert step(True, 256) < step(False, 256)


def test_tbo_split_pays_the_weight_reads_twice():
    c1 = build_step_cost("calibrated", H100, DSV3, _ep72(False), "decode")
    c2 = build_step_cost("calibrated", H100, DSV3, _ep72(True), "decode")
    b1, b2 = c1.breakdown(0, 0, 0, 8 * 72, 8 * 72 * 2000.0), c2.breakdown(0, 0, 0, 8 * 72, 8 * 72 * 2000.0)
    assert b2["attn_proj"] == pytest.approx(2 * b1["attn_proj"], rel=0.05)
    assert b2["comm"] < b1["comm"]


# -- 4. expert load ---------------------------------------------------------------------------------
def test_skewed_imbalance_is_flattened_by_eplb():
    """Zipf-skewed expert popularity over 256 experts on 72 ranks: without EPLB the busiest rank
    carries far more than the mean; EPLB's 32 redundant replicas bring it back near 1; routing
    noise adds the sqrt(2 ln ranks / A) tail; TP-sharded experts have no imbalance."""
    skewed = expert_load(256, 8, 72, skew=0.6)
    balanced = expert_load(256, 8, 72, skew=0.6, redundant=32, eplb=True)
    uniform = expert_load(256, 8, 72)
    a = 64 * 72 * 8
    assert skewed.imbalance(a) > 1.5 * balanced.imbalance(a)
    assert balanced.imbalance(a) < 1.5 and uniform.a == pytest.approx(1.0)
    assert uniform.imbalance(1e3) > uniform.imbalance(1e6)
    assert expert_load(256, 8, 8, skew=1.0, expert_parallel=False).imbalance(100) == 1.0
    p = popularity(256, 8, 2.0)
    assert p.sum() == pytest.approx(1.0) and p.max() <= 1 / 8 + 1e-12


def test_hot_rank_slows_the_moe_step():
    g = GroupSpec(nodes=9, dp=72, ep=72, enable_dp_attention=True, engine=EngineSpec(deepep_mode="low_latency"))
    flat = build_step_cost("calibrated", H800, DSV3, g, "decode")
    hot = build_step_cost("calibrated", H800, DSV3, g, "decode", expert_load=ExpertLoadSpec(skew=0.6))
    b = 128 * 72
    fb, hb = flat.breakdown(0, 0, 0, b, b * 2000.0), hot.breakdown(0, 0, 0, b, b * 2000.0)
    assert hb["moe"] > fb["moe"] and hb["comm"] > fb["comm"]


# -- 5. collective latency --------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["roofline", "calibrated"])
def test_tp8_allreduce_within_the_measured_range(kind):
    """A TP8 all-reduce of a decode batch (32 tokens x 8192 x BF16 = 512 KB) takes 10-30 us on
    H100 (NCCL 2.29: 15.6 us at 1 KB, 25 us at 2 MB), not 2 x 7 x 10 us."""
    c = build_step_cost(kind, H100, LLAMA70, GroupSpec(gpus=8), "decode")
    fixed, per_byte = c.c_ar_attn
    t = fixed + per_byte * 32 * 8192 * 2
    assert 10e-6 < t < 30e-6
    assert allreduce_s(512e3, 8, 5.4e-6, 0.86e-6, 318e9) < 30e-6


def test_tp8_is_not_slower_than_tp4_for_70b_decode():
    for kind in ("roofline", "calibrated"):
        t8 = build_step_cost(kind, H100, LLAMA70, GroupSpec(gpus=8), "decode").step_time(0, 0, 0, 32, 32 * 2000.0)
        t4 = build_step_cost(kind, H100, LLAMA70, GroupSpec(gpus=4), "decode").step_time(0, 0, 0, 32, 32 * 2000.0)
        assert t8 < t4, kind


def test_dp_attention_runs_dense_layers_data_parallel():
    """Under DP attention (SGLang's large-EP setup, --moe-dense-tp-size 1) the dense layers run
    on each rank's own tokens: no all-reduce over the whole cluster."""
    c = build_step_cost("calibrated", H800, DSV3, _ep72(False), "decode")
    assert c.dense_tp == 1 and c.c_ar_attn == (0.0, 0.0)


# -- 6. DeepEP byte count, MLA decode, memory --------------------------------------------------------
def test_deepep_normal_bandwidth_is_a_property_of_the_nic():
    """The normal-kernel legs count link-crossing bytes only (comm.deepep_legs): fitted that way,
    H800's README rows and H100's AIConfigurator times give one RDMA bandwidth for the same
    400 Gb/s NIC (within 25%), below its ~50 GB/s line rate; counting DeepEP's reported bytes
    gave 51 vs 62-69 GB/s (physics review 2026-11-26)."""
    for op in ("dispatch", "combine"):
        h800 = H800.calibration[f"deepep_normal_{op}"]["rdma_gbps"]
        h100 = H100.calibration[f"deepep_normal_{op}"]["rdma_gbps"]
        assert abs(h100 - h800) / h800 < 0.25
        assert max(h100, h800) < 50.0
    _, rdma = deepep_legs(4096, 7168, 8, 16, 8, ELEM_BYTES["dispatch"], dedup_nodes=True)
    _, rep = deepep_reported_bytes(4096, 7168, 8, 16, 8, ELEM_BYTES["dispatch"])
    assert rdma == pytest.approx(rep / 2, rel=0.01)  # EP16: one of the two nodes a token hits is its own


def test_mla_decode_does_not_borrow_the_prefill_attention_efficiency():
    g = GroupSpec(nodes=2, dp=16, ep=16, enable_dp_attention=True, engine=EngineSpec(deepep_mode="low_latency"))
    base = build_step_cost("roofline", H800, DSV3, g, "decode")
    other = dataclasses.replace(H800, efficiency=dataclasses.replace(H800.efficiency, attention=0.2))
    changed = build_step_cost("roofline", other, DSV3, g, "decode")
    args = (0, 0, 0, 64 * 16, 64 * 16 * 4000.0)
    assert changed.breakdown(*args)["attn_core"] == base.breakdown(*args)["attn_core"]
    assert base.kernels.decode_attn.eff == H800.efficiency.mla_decode  # FlashMLA's 580 / 989


def test_decode_memory_counts_cuda_graphs_and_deepep_buffers():
    g = _ep72(False)
    rt = runtime_bytes(DSV3, g, "decode")
    ll = deepep_low_latency_bytes(7168, 288)
    assert 1.5e9 < ll < 3e9  # 4 buffers of 288 experts x 128 tokens x ~14.5 KB
    assert rt == pytest.approx(5 * 2**30 + ll)
    assert runtime_bytes(DSV3, dataclasses.replace(g, engine=dataclasses.replace(g.engine, cuda_graph_max_bs=0)),
                         "decode") == pytest.approx(ll)
    # a mem_fraction_static that leaves less than the runtime buffers shrinks the KV pool
    tight = dataclasses.replace(g, engine=dataclasses.replace(g.engine, mem_fraction_static=0.99))
    loose = dataclasses.replace(g, engine=dataclasses.replace(g.engine, mem_fraction_static=0.85))
    assert instance_memory(H800, DSV3, tight).available_bytes_per_gpu == pytest.approx(H800.gpu.hbm_bytes - rt)
    assert instance_memory(H800, DSV3, tight).kv_tokens < instance_memory(H800, DSV3, loose).kv_tokens * 1.3


# -- 7. DP-attention synchronisation ---------------------------------------------------------------
def test_busiest_dp_rank_sets_the_step():
    c = build_step_cost("calibrated", H800, DSV3, _ep72(False), "decode")
    b = 32 * 72
    even = c.step_time(0, 0.0, 0, b, b * 2000.0)
    assert c.step_time(0, 0.0, 0, b, b * 2000.0, rank_tokens=32.0) == even
    assert c.step_time(0, 0.0, 0, b, b * 2000.0, rank_tokens=96.0) > even
    assert c.c_dp_sync > 0  # every DP step pays one small collective over the world
