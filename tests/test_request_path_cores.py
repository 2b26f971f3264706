"""The request path's hops share the placed host cores (issue 24, sim/host_cores.py ``hop``):
a hop is CPU work of an unpinned process (HTTP server, proxy, engine core) that takes the least
loaded core and shares it. Analytic answers; without a placement the fixed delays stay."""
from __future__ import annotations

import numpy as np
import pytest
import simpy

from pdsim import api
from pdsim.sim.host_cores import HostCores
from pdsim.workload.table import RequestTable

from builders import REPO

CPU = REPO / "workloads/scenarios/cpu-vllm-tiny-llama.yaml"
PD = REPO / "workloads/scenarios/cpu-vllm-tiny-llama-1p1d.yaml"


def _hop_end(workers: list[int], work: float, background: float = 0.0) -> tuple[float, list[int]]:
    """(when a hop of ``work`` s started at t=0 is done, the busy steps on each core then), with an
    always-busy worker (a step of 1,000 s) on each core id of ``workers``."""
    env = simpy.Environment()
    host = HostCores(env, 2, {}, background=background)
    for c in workers:
        host.cores[c].run(1000.0)
    end = []

    def go():
        yield host.hop(work).done
        end.append(env.now)

    env.process(go())
    env.run(until=100.0)
    return end[0], [c.busy for c in host.cores]


def test_a_hop_alone_on_an_idle_host_takes_its_work():
    end, _ = _hop_end([], 0.02)
    assert end == pytest.approx(0.02, rel=1e-12)


def test_a_hop_beside_a_busy_worker_on_each_core_takes_twice_its_work():
    end, busy = _hop_end([0, 1], 0.02)
    assert end == pytest.approx(0.04, rel=1e-12)
    assert busy == [1, 1]  # the hop left; the workers go on


def test_a_hop_takes_the_free_core():
    # a worker on core 0 only: the hop runs on core 1 at full speed, and the worker is not slowed
    end, _ = _hop_end([0], 0.02)
    assert end == pytest.approx(0.02, rel=1e-12)
    # one background process spread over two idle cores (half on each): the hop takes core 0 (a
    # tie), and the background moves to core 1, which nothing else wants: the hop runs alone
    end, _ = _hop_end([], 0.03, background=1.0)
    assert end == pytest.approx(0.03, rel=1e-12)


def test_background_shares_the_hop_core():
    # background 2 on two idle cores: the hop takes core 0 and the water filling (the kernel's
    # balancing) leaves it 0.5 of the background, the other core 1.5 -> the hop at 1/1.5
    end, _ = _hop_end([], 0.02, background=2.0)
    assert end == pytest.approx(0.03, rel=1e-12)
    # beside a busy worker on each core: core 0 holds worker + hop, core 1 its worker; the
    # background fills core 1 up to core 0's 2 and the rest evenly: 0.5 on core 0 -> 2.5x
    end, _ = _hop_end([0, 1], 0.02, background=2.0)
    assert end == pytest.approx(0.05, rel=1e-12)


def test_bad_hop_work_is_refused():
    host = HostCores(simpy.Environment(), 2, {})
    with pytest.raises(ValueError, match="work"):
        host.hop(-1.0)
    with pytest.raises(ValueError, match="work"):
        host.hop(float("nan"))


def _one_request(extra: list[str], router_ms: float):
    sc = api.load_scenario(CPU, [f"overheads.router_ms={router_ms}", *extra])
    table = RequestTable(np.zeros(1), np.array([300]), np.array([40]), source="t")
    res = api.simulate(sc, table=table)
    return float(res.requests["ttft_s"].iloc[0]), res


def test_world_hops_on_an_idle_and_on_a_loaded_host():
    x = 0.004
    sc = api.load_scenario(CPU)
    assert not sc.hardware.efficiency.tokenize_ns  # the way in is router_ms alone here
    # idle host (the bundled placement, no background): each hop finds a free core -> 2x router_ms
    t0, r0 = _one_request([], 0.0)
    tx, rx = _one_request([], x * 1e3)
    assert tx - t0 == pytest.approx(2 * x, rel=1e-9)
    prefill = t0  # the first (prefill) step alone, at its price
    # background 2: the way in on an idle host keeps 0.5 of it (1.5x, as above); so does the prefill
    # step on core 0 (the rest fills the idle core to 1.5); the way out joins the decoding worker on
    # core 0 while the background fills core 1 to 2 (2x)
    tb, rb = _one_request(["host.background=2.0"], x * 1e3)
    assert tb == pytest.approx(1.5 * x + 1.5 * prefill + 2 * x, rel=1e-9)
    # the stream moved as a whole: its gaps are the engine's (the first gap is not shortened)
    itl = rb.record.tokens.itl_samples(rb.record.requests["first_token_s"], np.ones(1, dtype=bool))[0]
    assert itl.min() > 0


def test_no_placement_keeps_the_fixed_delays():
    # the bundled 1P1D scenario without its host block: hops are fixed delays, no stream moves
    sets = ["host.unpinned={}", "host.pollers={}", "host.cores=0", "host.placement={}", "overheads.router_ms=20"]
    table = RequestTable(np.array([0.0, 0.01, 0.02, 0.5]), np.array([700, 200, 450, 900]),
                         np.array([20, 9, 30, 5]), source="t")
    res = api.simulate(api.load_scenario(PD, sets), table=table)
    assert res.record.tokens.first_shift is None
    req = res.record.requests
    # the engine saw each request 20 ms after it was sent, whatever else was running
    assert (req["routed_s"] - req["arrival_s"]) == pytest.approx(np.full(4, 0.02), rel=1e-9)


def test_deterministic_with_placement_and_load():
    sets = ["host.background=0.8", "overheads.router_ms=20"]
    rng = np.random.default_rng(3)
    table = RequestTable(np.sort(rng.uniform(0, 4, 12)), rng.integers(128, 900, 12), rng.integers(5, 40, 12),
                         source="t")
    a = api.simulate(api.load_scenario(PD, sets), table=table)
    b = api.simulate(api.load_scenario(PD, sets), table=table)
    assert a.requests["ttft_s"].tolist() == b.requests["ttft_s"].tolist()
    assert a.record.tokens.first_shift.tolist() == b.record.tokens.first_shift.tolist()
    # loaded: some hops waited (the way in beyond its 10 ms: half of router_ms through the 1P1D
    # proxy, test_handoff_hop.py; the first token's way out beyond its own)
    req = a.record.requests
    assert ((req["routed_s"] - req["arrival_s"]) > 0.01 + 1e-9).any()
    assert (a.record.tokens.first_shift > 0).any()
