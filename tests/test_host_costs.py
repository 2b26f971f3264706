"""The host model (issue 24, item 3; pdsim/costs/host.py): eager launches from the layer's structure,
CUDA graphs removing them, and processes sharing host cores."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from pdsim import api
from pdsim.costs.host import busy_processes, core_share, eager_layer_s, host_scale, kernels_per_layer
from pdsim.costs.registry import build_step_cost
from pdsim.sim.world import World
from pdsim.specs.catalog import load_hardware_ref, load_model_ref
from pdsim.workload.table import RequestTable

from builders import REPO, resolve, scenario_dict


def test_kernels_per_layer_follow_the_decoder_layer():
    assert kernels_per_layer(False, 0, 1, 1) == 10  # norm, QKV, rotary, cache write, attention, O, norm, 3 MLP
    assert kernels_per_layer(False, 0, 2, 1) == 12  # + two all-reduces
    assert kernels_per_layer(True, 1, 1, 8) == 5 + 2 + 7 + 3 + 2  # MoE + shared expert + EP dispatch/combine


def _eff(hw, **kw):
    return dataclasses.replace(hw, efficiency=dataclasses.replace(hw.efficiency, **kw))


def test_eager_launch_structural_and_cuda_graphs_remove_it():
    hw = load_hardware_ref("h100")
    model = load_model_ref("llama-3.1-8b")
    group = resolve(scenario_dict("colocated")).scenario.cluster.colocated[0]
    assert eager_layer_s(model, group, hw.efficiency, 1) == pytest.approx(hw.efficiency.layer_launch_us * 1e-6)
    hw2 = _eff(hw, kernel_launch_us=4.0, module_call_us=2.0)
    assert eager_layer_s(model, group, hw2.efficiency, 1) == pytest.approx((10 * 4 + 12 * 2) * 1e-6)
    eager = dataclasses.replace(group, engine=dataclasses.replace(group.engine, cuda_graph_max_bs=0))
    graphs = dataclasses.replace(group, engine=dataclasses.replace(group.engine, cuda_graph_max_bs=64))

    def launch(h, g):
        bd = build_step_cost("roofline", h, model, g, "colocated").breakdown(0, 0.0, 0, 8, 8 * 1000.0)
        return bd["launch"], sum(bd[k] for k in ("attn_proj", "mlp", "moe", "comm", "lm_head"))
    L = model.num_layers
    # eager launches are asynchronous (costs/step.py): only the issue time beyond the GPU work shows
    hw3 = _eff(hw, kernel_launch_us=40.0, module_call_us=20.0)  # 32 x 640 us of issue > the ~7 ms of GPU work
    exposed, gpu = launch(hw3, eager)
    assert exposed == pytest.approx(L * 640e-6 - gpu) and exposed > 0.5 * L * 640e-6
    hidden, _ = launch(hw2, eager)  # 32 x 64 us of issue hides behind the step: the graph replay's floor
    assert hidden == pytest.approx(L * hw.efficiency.graph_launch_us * 1e-6)
    assert launch(hw3, graphs)[0] == pytest.approx(L * hw.efficiency.graph_launch_us * 1e-6)  # graph replay only


def test_processes_sharing_the_cpu_hosts_cores():
    assert core_share(4, 2) == 2 and core_share(1, 2) == 1 and core_share(3, 0) == 1
    colo = api.load_scenario(REPO / "workloads/scenarios/cpu-vllm-tiny-llama.yaml")
    # the static share is what a scenario without a placement gets (the bundled one states its own)
    pd = api.load_scenario(REPO / "workloads/scenarios/cpu-vllm-tiny-llama-1p1d.yaml",
                           ["host.unpinned={}", "host.pollers={}", "host.placement={}"])
    assert busy_processes(colo.scenario, 1) == 4  # API server, engine core, worker, client = as measured
    assert busy_processes(pd.scenario, 1) == 8  # two servers of three, the P/D proxy, the client
    assert host_scale(colo) == 1.0
    assert host_scale(pd) == pytest.approx((8 / 2) / (4 / 2))
    table = RequestTable(np.zeros(1), np.array([64]), np.array([2]), source="t")
    w = World(pd, table)
    e0, e1 = pd.hardware.efficiency, w.resolved.hardware.efficiency
    assert e1.step_overhead_us == pytest.approx(2 * e0.step_overhead_us)
    assert e1.seq_overhead_us == pytest.approx(2 * e0.seq_overhead_us)
    placed = api.load_scenario(REPO / "workloads/scenarios/cpu-vllm-tiny-llama-1p1d.yaml")
    assert World(placed, table).resolved.hardware.efficiency.step_overhead_us == e0.step_overhead_us  # cores shared
    assert host_scale(resolve(scenario_dict("disagg"))) == 1.0  # a GPU datasheet profile records no host


def test_tokeniser_delays_each_request_by_its_prompt():
    sc = resolve(scenario_dict("colocated"))
    table = RequestTable(np.array([0.0, 5.0]), np.array([1000, 50_000]), np.array([2, 2]), source="t")
    base = api.simulate(sc, table=table).requests["ttft_s"].to_numpy()
    tok = dataclasses.replace(sc, hardware=_eff(sc.hardware, tokenize_ns=1000.0))  # 1 us per token
    got = api.simulate(tok, table=table).requests["ttft_s"].to_numpy()
    assert got - base == pytest.approx([1e-3, 50e-3], rel=1e-6)
