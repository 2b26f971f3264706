"""Engine cores that poll: host.pollers / host.autogroup (pdsim/specs/host.py, sim/host_cores.py).

vLLM 0.32's engine core waits for its worker's answer spinning on sched_yield() for 1 s after its
last read (``vllm/distributed/device_communicators/shm_broadcast.py``, ``SpinCondition.wait``,
``busy_loop_s=1``). Measured on a 2-core validation host (``calibration/microbench/poller_share.py``,
2026-11-28, a one-thread job): a CPU-bound job beside such a loop on its core took 1.68-2.10x its
time alone when the loop ran in another session with autogroup scheduling on, ~1x in its own
session (the Zen 1 host's 2.07-2.94x / 0.84-1.04x of 2026-11-27 came from a two-thread job, and
0.87-1.06x with autogroup off). The 1P1D step traces (``validation/cpu-vllm-calibration/zen1/
step-traces/pd-*/pd_trace.json``) show the same from the engine: P's prefills ran 1.81x / 2.05x
their price while D was busy and 1.11x / 1.07x while it was idle (light / knee).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from pdsim import api
from pdsim.sim.host_cores import HostCores
from pdsim.specs.errors import SpecError

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "validation" / "cpu-vllm-calibration" / "zen1" / "step-traces"


def _two_jobs(work_a: float, work_b: float, poll: float, cores: int = 2) -> float:
    """When job A (core 0) ends beside job B (on core 1, or core 0 on a host of one core) whose
    server's pollers weigh ``poll``."""
    env = simpy.Environment()
    hc = HostCores(env, cores, {})
    a = hc.cores[0].run(work_a)
    hc.cores[min(1, cores - 1)].run(work_b, 0.0, poll)
    env.run(a.done)
    return env.now


def test_a_poller_takes_its_groups_share_of_the_other_servers_core():
    """Under autogroup B's server is one scheduling group loading both cores (its worker on core 1,
    its poller on core 0), so its weight on core 0 is half a group's: A keeps 2/3 of its core. The
    kernel's figure for this arrangement (calibration/microbench/group_share.py, one job beside a
    ``sched_yield`` loop whose session keeps the other core busy, Intel host, kernel 6.18,
    2026-11-28): 1.44x, median of five (1.38-1.50)."""
    assert _two_jobs(1.0, 10.0, 0.0) == pytest.approx(1.0)
    assert _two_jobs(1.0, 10.0, 1.0) == pytest.approx(1.5)
    assert _two_jobs(1.0, 10.0, 0.5) == pytest.approx(4 / 3)  # spinning half the time: weight 0.5 / 1.5
    # it yields to its own server's worker: on a host of one core it weighs on nothing more
    assert _two_jobs(1.0, 10.0, 1.0, cores=1) == pytest.approx(2.0)  # the two workers share, no more


def test_the_poller_leaves_with_its_step():
    """B ends at 0.5 s: A ran at 2/3 speed until then, then alone."""
    assert _two_jobs(1.0, 0.5, 1.0) == pytest.approx(0.5 + (1.0 - 0.5 * 2 / 3))


@settings(max_examples=60, deadline=None)
@given(st.floats(0.01, 5.0), st.floats(0.01, 5.0), st.floats(0.0, 2.0), st.floats(0.0, 2.0))
def test_more_polling_never_speeds_a_step(wa, wb, p1, p2):
    lo, hi = sorted((p1, p2))
    assert _two_jobs(wa, wb, lo) <= _two_jobs(wa, wb, hi) + 1e-12
    assert _two_jobs(wa, wb, lo) >= wa - 1e-12  # never faster than alone


def test_poll_weight_follows_the_spin_window():
    hc = HostCores(simpy.Environment(), 2, {}, poll_window_s=1.0)
    assert hc.poll_weight(1.0, 0.0, 0.01) == 1.0  # back-to-back decode steps: spinning throughout
    assert hc.poll_weight(1.0, 0.5, 1.0) == pytest.approx(0.5)  # the window closes halfway
    assert hc.poll_weight(1.0, 2.0, 0.3) == 0.0  # slept: a prompt after a quiet spell
    assert hc.poll_weight(0.0, 0.0, 0.3) == 0.0


def _pd(sets=()):
    return api.load_scenario("cpu-vllm-tiny-llama-1p1d", ["workload.num_requests=60", "workload.rate=0.5",
                                                          *sets])


def test_autogroup_off_the_pollers_weigh_nothing():
    on = api.simulate(_pd()).summary()
    off = api.simulate(_pd(["host.autogroup=false"])).summary()
    none = api.simulate(_pd(["host.pollers={}"])).summary()
    assert off["mean_ttft_ms"] == none["mean_ttft_ms"] and off["mean_itl_ms"] == none["mean_itl_ms"]
    # P's prefills share their core with D's poller: a third of it while D's server also loads its own
    assert on["mean_ttft_ms"] > 1.05 * off["mean_ttft_ms"]


def _record_jobs(monkeypatch):
    jobs = []
    start = HostCores._start

    def recorded(self, core, work, extra=0.0, poll=0.0, *args):
        job = start(self, core, work, extra, poll, *args)
        jobs.append((core.cid, self.env.now, work, poll, job))
        return job

    monkeypatch.setattr(HostCores, "_start", recorded)
    return jobs


def _trace(load: str) -> dict:
    return json.loads((TRACES / f"pd-{load}" / "pd_trace.json").read_text())


@pytest.mark.parametrize("load", ["light", "knee"])
def test_the_spin_window_gives_the_engine_cores_measured_runnable_time(monkeypatch, load):
    """P's engine core spins only when P's prefills come within a second of each other: the share
    of P's stepping time its poller is on matches the share its engine core was runnable (CPU +
    run-queue wait over P's busy time in the recording's trace: 0.20 light, 0.32 knee)."""
    from pdsim.validate.case import run_case

    t = _trace(load)
    ec = next(v for k, v in t["host"]["share"]["processes"].items() if k.startswith("P:VLLM::EngineCor"))
    real = (ec["cpu_s"] + ec["wait_s"]) / (t["worker_busy_share"]["P"] * t["span_s"])
    jobs = _record_jobs(monkeypatch)
    run_case(ROOT / "validation" / f"cpu-vllm-zen1-pd-{load}")
    p = [(w, poll) for cid, _, w, poll, _ in jobs if cid == 0 and w > 0.02]  # P's prefills; poll: the spin share
    sim = sum(w * poll for w, poll in p) / sum(w for w, _ in p)
    assert sim == pytest.approx(real, abs=0.08), (sim, real)
    d = [poll for cid, _, w, poll, _ in jobs if cid == 1 and w > 0]
    assert np.mean(d) > 0.95  # D's engine core spins through D's back-to-back decode steps


@pytest.mark.xfail(strict=True, reason="group shares price D's poller at a third of P's core (measured, "
                   "costs/group_share.py): 1.43x / 1.61x simulated against the trace's 1.71x / 2.05x; the "
                   "equal share priced before gave 1.57x / 1.81x. What else loads P's core is not modelled")
def test_p_runs_at_the_traced_speed_beside_d(monkeypatch):
    """The knee run of zen1: P's prefills over their price, on average and while D was busy (more
    than half of the step), simulated against the trace (1.71 and 2.05). Since D's poller is priced
    by its group's weight (its server also keeps D's core busy: 1.5x, not 2x, measured on the Intel
    host by calibration/microbench/group_share.py), the simulated P runs 1.43x and 1.61x: 16% and
    21% under the engine, past this check's 15% (the equal share's 1.57x / 1.81x were within it,
    pricing the poller above what the kernel gives it). The gap is load on P's core the host model
    does not carry; this turns into a failure when something closes it."""
    from pdsim.validate.case import run_case

    t = _trace("knee")
    jobs = _record_jobs(monkeypatch)
    ends = {}
    leave = HostCores._leave

    def left(self, job):
        ends[id(job)] = self.env.now
        leave(self, job)

    monkeypatch.setattr(HostCores, "_leave", left)
    run_case(ROOT / "validation" / "cpu-vllm-zen1-pd-knee")
    d_busy = sorted((t0, ends[id(j)]) for cid, t0, w, _, j in jobs if cid == 1 and id(j) in ends)
    starts = np.array([a for a, _ in d_busy])
    stops = np.array([b for _, b in d_busy])

    def busy_share(a, b):
        lo, hi = np.maximum(starts, a), np.minimum(stops, b)
        return float(np.clip(hi - lo, 0, None).sum()) / (b - a)

    ratio, beside = [], []
    for cid, t0, w, _, j in jobs:
        if cid == 0 and w > 0.02 and id(j) in ends:
            ratio.append((ends[id(j)] - t0) / w)
            beside.append(busy_share(t0, ends[id(j)]) > 0.5)
    ratio, beside = np.array(ratio), np.array(beside)
    assert ratio.mean() == pytest.approx(t["p_worker_over_price"]["mean"], rel=0.15)
    assert ratio[beside].mean() == pytest.approx(t["p_worker_over_price_d_busy>0.5"]["mean"], rel=0.15)


def test_bad_poller_settings_name_their_field():
    with pytest.raises(SpecError, match="host.pollers.dec"):
        api.load_scenario("cpu-vllm-tiny-llama-1p1d", ["host.pollers={dec: 1}"])
    with pytest.raises(SpecError, match="host.autogroup"):
        api.load_scenario("cpu-vllm-tiny-llama-1p1d", ["host.autogroup=maybe"])
    with pytest.raises(SpecError, match="pollers.decode"):
        api.load_scenario("cpu-vllm-tiny-llama-1p1d", ["host.pollers={decode: -1}"])
    with pytest.raises(SpecError, match="poll_window_ms"):
        api.load_scenario("cpu-vllm-tiny-llama-1p1d", ["host.poll_window_ms=-5"])
    with pytest.raises(SpecError, match="placement"):
        api.load_scenario("cpu-vllm-tiny-llama", ["host.placement={}", "host.pollers={colocated: 1}"])



def test_a_recording_under_the_other_autogroup_setting_is_named(tmp_path):
    """``pdsim replay`` keeps the host's kernel.sched_autogroup_enabled with the run; validating it
    against a scenario that says otherwise notes it, with the setting to use."""
    import shutil

    from pdsim.specs.machine import autogroup_mismatch
    from pdsim.validate.case import run_case

    host = api.load_scenario("cpu-vllm-tiny-llama-1p1d").scenario.host
    assert autogroup_mismatch(host, 1) is None and autogroup_mismatch(host, None) is None
    assert "host.autogroup=false" in autogroup_mismatch(host, 0)
    colo = api.load_scenario("cpu-vllm-tiny-llama").scenario.host
    assert autogroup_mismatch(colo, 0) is None  # nothing polls there: nothing to say
    case = tmp_path / "case"
    shutil.copytree(ROOT / "validation" / "cpu-vllm-zen1-pd-light", case)
    bench = case / "real" / "bench.json"
    doc = json.loads(bench.read_text())
    doc["pdsim_meta"]["sched_autogroup"] = 0
    bench.write_text(json.dumps(doc))
    (case / "case.yaml").write_text((case / "case.yaml").read_text().replace("../../", str(ROOT) + "/"))
    notes = run_case(case).notes
    assert any("sched_autogroup_enabled=0" in n and "host.autogroup=false" in n for n in notes), notes


def test_background_shares_a_core_by_its_weight():
    """One busy background process of weight w on a 1-core host beside a worker: the worker's step
    takes (1 + w) x its work (CFS shares a core in proportion to weight)."""
    for w in (1.0, 0.107, 3.0):
        sc = api.load_scenario("cpu-vllm-tiny-llama", ["host.placement={colocated: [0]}", "host.cores=1",
                                                       "host.background=1", f"host.background_weight={w}"])
        env = simpy.Environment()
        hc = HostCores.of(env, sc.scenario)
        job = hc.cores[0].run(1.0)
        env.run(job.done)
        assert env.now == pytest.approx(1.0 + w)
    with pytest.raises(SpecError, match="background_weight"):
        api.load_scenario("cpu-vllm-tiny-llama", ["host.background_weight=0"])


def test_pollers_that_spin_beside_their_own_worker_weigh_nothing():
    """``host.poll_away``: a poller costs another server only for the share of its spinning it
    spends on that server's core. Never away is the same as weighing nothing (autogroup off);
    the measured shares (D's engine core on P's core 0.735, P's on D's 0.52: the traced 1P1D
    recordings' placement samples) put TTFT between that and always away."""
    def ttft(*sets):
        return api.simulate(_pd(list(sets))).summary()["mean_ttft_ms"]

    never = ttft("host.poll_away={prefill: 0, decode: 0}")
    assert never == ttft("host.autogroup=false")
    measured = ttft("host.poll_away={prefill: 0.52, decode: 0.735}")
    always = ttft("host.poll_away={prefill: 1, decode: 1}")
    assert never < measured < always


def test_the_file_connector_adds_its_measured_work_per_request_to_every_step():
    """ExampleConnector's own work in each step, per request (``shared_storage`` param
    ``step_seq_us``): decode steps on vLLM CPU servers with and without it, interleaved twice,
    took +0.36 / +0.39 ms at batch 1 and +1.44 / +1.15 ms at batch 4
    (validation/cpu-vllm-calibration/zen1/host-contention/connector_overhead.json): priced as 0.36 ms
    more host work per request in every P and D step, and nothing on a transport without it."""
    from pdsim.sim.world import World
    from pdsim.workload import materialize

    def decode_price(sets, n):
        sc = _pd(sets)
        w = World(sc, materialize(sc.scenario.workload, sc.scenario.seed, sc.base_dir))
        plan = next(p for p in w.plans if p.role == "decode")
        return plan.cost.step_time(0, 0.0, 0, n, n * 500.0)

    for n in (1, 4, 16):
        with_it = decode_price([], n)
        without = decode_price(["transfer.params={step_seq_us: 0}"], n)
        assert with_it - without == pytest.approx(n * 360e-6, rel=1e-9)


def test_poll_away_finds_its_group_under_any_of_its_names():
    """``decode`` and ``decode[0]`` name the same group: a share given under one name applies to
    pollers counted under the other (nothing silently left at the default)."""
    a = api.simulate(_pd(["host.pollers={prefill: 1, 'decode[0]': 1}",
                          "host.poll_away={prefill: 0.4, decode: 0.2}"])).summary()
    b = api.simulate(_pd(["host.pollers={prefill: 1, decode: 1}",
                          "host.poll_away={prefill: 0.4, 'decode[0]': 0.2}"])).summary()
    c = api.simulate(_pd(["host.poll_away={prefill: 0.4, decode: 0.2}"])).summary()
    assert a["mean_ttft_ms"] == b["mean_ttft_ms"] == c["mean_ttft_ms"]
    assert c["mean_ttft_ms"] != api.simulate(_pd()).summary()["mean_ttft_ms"]
