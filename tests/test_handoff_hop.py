"""The 1P1D hand-off as it runs on a CPU host (issue 24 item 5, sim/host_cores.py ``SerialFront``,
world.py ``handoff``, transports/shared_storage.py, engine/admission.py tail joins): the request
path's hops queue at one front process (FIFO), the proxy's P -> D hop is a hop of its own, and a
placed D computes the prompt's tail on its shared core. Analytic answers; without a placement
nothing changes."""
from __future__ import annotations

import numpy as np
import pytest
import simpy

from pdsim import api
from pdsim.sim.host_cores import HostCores
from pdsim.sim.host_front import SerialFront
from pdsim.workload.table import RequestTable

from builders import REPO

PD = REPO / "workloads/scenarios/cpu-vllm-tiny-llama-1p1d.yaml"
# the bundled 1P1D placement (P's worker on core 0, D's on core 1) without the measured unpinned load,
# so that a lone request meets idle cores
PLACED = ["host.unpinned={}", "host.pollers={}"]  # the hops alone: nothing else busy on the cores
NO_HOST = ["host.unpinned={}", "host.pollers={}", "host.cores=0", "host.placement={}"]


def _front_ends(works: list[float], busy_cores: tuple[int, ...] = ()) -> list[float]:
    """End times of hops of ``works`` submitted together at t=0 to one front on a 2-core host with
    an always-busy worker on each core of ``busy_cores``."""
    env = simpy.Environment()
    host = HostCores(env, 2, {})
    for c in busy_cores:
        host.cores[c].run(1000.0)
    front = SerialFront(host)
    ends = [None] * len(works)
    for i, w in enumerate(works):
        front.hop(w).done.callbacks.append(lambda _e, i=i: ends.__setitem__(i, env.now))
    env.run(until=100.0)
    return ends


def test_one_hop_at_the_front_takes_its_work():
    assert _front_ends([0.02]) == [pytest.approx(0.02, rel=1e-12)]


def test_two_hops_at_one_front_take_the_sum():
    # one process serves them in turn, though the host has a free core for each
    assert _front_ends([0.02, 0.03]) == [pytest.approx(0.02, rel=1e-12), pytest.approx(0.05, rel=1e-12)]
    # beside an always-busy worker on each core each hop runs at half speed, still one at a time
    assert _front_ends([0.02, 0.03], (0, 1)) == [pytest.approx(0.04, rel=1e-12), pytest.approx(0.10, rel=1e-12)]


def test_a_queued_hop_knows_when_it_would_end():
    env = simpy.Environment()
    host = HostCores(env, 2, {})
    for c in (0, 1):
        host.cores[c].run(1000.0)
    front = SerialFront(host)
    a, b = front.hop(0.02), front.hop(0.03)
    env.run(until=0.01)  # a is half done at half speed
    assert front.finish_time(a) == pytest.approx(0.04, rel=1e-12)
    assert front.finish_time(b) == pytest.approx(0.04 + 2 * 0.03, rel=1e-12)


def test_bad_front_hop_work_is_refused():
    front = SerialFront(HostCores(simpy.Environment(), 2, {}))
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="work"):
            front.hop(bad)


def _one(sets: list[str], inputs=(700,), arrivals=(0.0,), outputs=(20,)):
    table = RequestTable(np.asarray(arrivals, float), np.asarray(inputs), np.asarray(outputs), source="t")
    return api.simulate(api.load_scenario(PD, sets), table=table).record.requests


def test_placed_handoff_moves_the_middle_of_the_path_between_p_and_d():
    x = 0.02  # router_ms of the 1P1D scenario: both servers' request path, in and out
    sc = api.load_scenario(PD)
    assert not sc.hardware.efficiency.tokenize_ns  # the way in is router_ms alone here
    r0 = _one(PLACED + ["overheads.router_ms=0"])
    rx = _one(PLACED + [f"overheads.router_ms={x * 1e3}"])
    # the way in to P: half of it (client -> proxy -> P); P's answer -> proxy -> D: the other halves
    assert float(rx["routed_s"][0] - rx["arrival_s"][0]) == pytest.approx(x / 2, rel=1e-9)
    assert float(rx["decode_admit_s"][0] - rx["transfer_end_s"][0]) == pytest.approx(x, rel=1e-9)
    assert float(r0["decode_admit_s"][0] - r0["transfer_end_s"][0]) == pytest.approx(0.0, abs=1e-12)
    # on idle cores the whole path costs what it did (2 x router_ms), only placed elsewhere
    ttft = lambda r: float(r["first_token_s"][0] - r["arrival_s"][0])  # noqa: E731
    assert ttft(rx) - ttft(r0) == pytest.approx(2 * x, rel=1e-9)
    # D alone on its idle core: the tail's step (file read + tail forward, no decodes beside it)
    # ends at its price, and that step's end is the first token
    first = float(r0["decode_admit_s"][0] + r0["d_load_s"][0])
    assert float(r0["first_token_s"][0]) == pytest.approx(first, rel=1e-12)


def test_placed_d_computes_the_tail_on_its_shared_core():
    # P and D workers on one core: a long prefill of the second request on P shares the core with
    # D's tail of the first, so the tail's step takes twice its price
    sets = ["host.unpinned={}", "host.cores=1", "host.placement={prefill: [0], decode: [0]}",
            "overheads.router_ms=0"]
    alone = _one(sets, inputs=(300,))
    p_end = float(alone["transfer_end_s"][0])  # P is done with the first (write included)
    r = _one(sets, inputs=(300, 1000), arrivals=(0.0, p_end), outputs=(20, 20))
    tail = float(r["d_load_s"][0])
    assert float(r["prefill_end_s"][1] - r["prefill_start_s"][1]) > 4 * tail  # the tail runs inside it
    assert float(r["first_token_s"][0] - r["decode_admit_s"][0]) == pytest.approx(2 * tail, rel=1e-9)


def test_no_placement_keeps_the_handoff_inside_the_fixed_path():
    r = _one(NO_HOST + ["overheads.router_ms=20"])
    assert float(r["routed_s"][0] - r["arrival_s"][0]) == pytest.approx(0.02, rel=1e-9)
    # D hears of it as P's files are written, and its first token is the tail's price after that
    assert float(r["decode_admit_s"][0]) == pytest.approx(float(r["transfer_end_s"][0]), abs=1e-12)
    first = float(r["decode_admit_s"][0] + r["d_load_s"][0]) + 0.02  # + the way out
    assert float(r["first_token_s"][0]) == pytest.approx(first, rel=1e-12)


def test_deterministic_with_handoff_hops_and_load():
    sets = ["host.background=0.8", "overheads.router_ms=20"]
    rng = np.random.default_rng(5)
    n = 14
    args = dict(inputs=rng.integers(128, 900, n), arrivals=np.sort(rng.uniform(0, 3, n)), outputs=rng.integers(5, 40, n))
    a, b = _one(sets, **args), _one(sets, **args)
    for col in ("routed_s", "decode_admit_s", "first_token_s", "finish_s"):
        assert np.asarray(a[col]).tolist() == np.asarray(b[col]).tolist()
    # loaded: some hand-offs waited beyond their 20 ms of work (sharing, or queued at the front)
    assert (np.asarray(a["decode_admit_s"] - a["transfer_end_s"]) > 0.02 + 1e-9).any()


def test_a_placed_run_whose_last_request_is_given_up_mid_step_keeps_its_log(monkeypatch):
    # D fails, requests time out and are retried, and D's last step is still running on its shared
    # core when the last request is given up: that step is logged as still running (accounting.py),
    # not as a decode step that ended (found by this run: "1103 decode-step ends for 1102 steps")
    monkeypatch.setenv("PDSIM_CHECK", "1")
    sets = ["workload.num_requests=60", "host.background=0.7",
            "faults={events: [{at_s: 3.0, kill: gpu, instance: D0, recover_after_s: 0.5}], request_timeout_s: 3.0}"]
    res = api.simulate(api.load_scenario(PD, sets))
    assert res.requests["ttft_s"].notna().any()


def test_tails_waiting_to_join_count_against_the_batch_limit():
    # eight prompts prefilled by P in one step reach D together; D may run 2 at a time: the tails
    # its step computes count as running (they join the batch when it ends)
    sets = PLACED + ["overheads.router_ms=0", "cluster.decode[0].engine.max_running_requests=2"]
    table = RequestTable(np.zeros(8), np.full(8, 300), np.full(8, 30), source="t")
    res = api.simulate(api.load_scenario(PD, sets), table=table)
    d = [st for inst, st in zip(res.record.instances, res.record.steps) if inst.role == "decode"][0]
    assert int(np.max(d["running_batch"])) == 2
    assert res.requests["ttft_s"].notna().all()
