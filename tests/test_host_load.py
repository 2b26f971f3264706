"""Processor sharing with other work on the host (costs/host_load.py, specs/host.py): a measured
stretch multiplies every step of a CPU-device engine, and only the per-step host work of a GPU one."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from pdsim import api
from pdsim.costs.host_load import StretchedStepCost
from pdsim.costs.registry import build_step_cost
from pdsim.specs.errors import SpecError
from pdsim.specs.host import HostSpec
from pdsim.workload.table import RequestTable

from builders import REPO, resolve, scenario_dict

CPU = REPO / "workloads/scenarios/cpu-vllm-tiny-llama.yaml"


def _steps(sc, table):
    res = api.simulate(sc, table=table)
    cols = res.record.steps[0]
    return np.asarray(cols["step_s"], float), np.asarray(cols["prefill_tokens"]), res


def test_a_cpu_device_runs_every_step_stretched():
    sc = api.load_scenario(CPU)
    table = RequestTable(np.zeros(1), np.array([700]), np.array([20]), source="t")  # one request: same batches
    d1, pf1, r1 = _steps(sc, table)
    # the bundled scenario places its worker (host.placement); a stretch replaces that account of the load
    d2, pf2, r2 = _steps(api.load_scenario(CPU, ["host.placement={}", "host.cpu_stretch=1.5"]), table)
    assert (pf1 == pf2).all() and len(d1) == len(d2) == 2 + 19  # two 512-token chunks' worth, then decodes
    assert d2 == pytest.approx(1.5 * d1, rel=1e-12)
    e1, e2 = r1.requests["e2e_s"].to_numpy(), r2.requests["e2e_s"].to_numpy()
    router = 2 * sc.scenario.overheads.router_ms * 1e-3  # the request path outside the engine: not stretched
    assert e2 - router == pytest.approx(1.5 * (e1 - router), rel=1e-9)


def test_the_stretched_cost_keeps_the_linearity_contract():
    sc = api.load_scenario(CPU)
    g = sc.scenario.cluster.colocated[0]
    inner = build_step_cost("auto", sc.hardware, sc.model, g, "colocated")
    cost = StretchedStepCost(inner, 1.25)
    c0, ca, cc = cost.step_coeffs(300, 1, 7)
    assert cost.step_time(300, 4.5e4, 1, 7, 3000.0) == c0 + ca * 4.5e4 + cc * 3000.0  # bit for bit
    assert cost.step_time(300, 4.5e4, 1, 7, 3000.0) == pytest.approx(1.25 * inner.step_time(300, 4.5e4, 1, 7, 3000.0))
    assert sum(cost.breakdown(300, 4.5e4, 1, 7, 3000.0).values()) == pytest.approx(cost.step_time(300, 4.5e4, 1, 7,
                                                                                                 3000.0))


def test_a_gpu_stretches_its_host_work_only():
    d = scenario_dict("colocated")
    base = resolve(d)
    hw = base.hardware
    hw = dataclasses.replace(hw, efficiency=dataclasses.replace(hw.efficiency, step_overhead_us=1000.0,
                                                                seq_overhead_us=0.0, ctx_overhead_ns=0.0))
    table = RequestTable(np.zeros(1), np.array([256]), np.array([6]), source="t")
    plain = dataclasses.replace(base, hardware=hw)
    stretched = dataclasses.replace(plain, scenario=dataclasses.replace(plain.scenario, host=HostSpec(2.0)))
    d1, _, _ = _steps(plain, table)
    d2, _, _ = _steps(stretched, table)
    assert d2 - d1 == pytest.approx(np.full(len(d1), 1000e-6), rel=1e-9)  # the 1 ms of host work, twice


def test_a_stretch_below_one_is_refused_naming_the_field():
    with pytest.raises(SpecError, match="cpu_stretch"):
        api.load_scenario(CPU, ["host.cpu_stretch=0.8"])
