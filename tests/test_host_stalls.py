"""Other work visiting a placed worker's core as whole processes (sim/host_stalls.py, ``host.visit_ms``):
analytic answers for a core that is always busy, idle, or visited a fraction of the time;
determinism by seed; bad input refused naming the field."""
from __future__ import annotations

import math

import numpy as np
import pytest
import simpy

from pdsim import api
from pdsim.sim.host_cores import HostCores
from pdsim.sim.host_stalls import Visits, busy_balance_ms
from pdsim.specs.errors import SpecError

from builders import REPO, load_script

CPU = REPO / "workloads/scenarios/cpu-vllm-tiny-llama.yaml"
TAU = 0.032  # s: a 2-CPU host's busy load-balance period, busy_balance_ms(2)


def _steps(work: float, n: int, background: float, visit_s: float, seed: int = 0) -> np.ndarray:
    """Durations of ``n`` back-to-back steps of ``work`` s on a one-core host's only core."""
    env = simpy.Environment()
    host = HostCores(env, 1, {("colocated", 0): (0,)}, background=background, visit_s=visit_s, seed=seed)
    core = host.cores[0]
    out = []

    def loop():
        for _ in range(n):
            t = env.now
            yield core.run(work).done
            out.append(env.now - t)

    env.process(loop())
    env.run()
    return np.array(out)


def test_the_kernels_busy_balance_period():
    assert busy_balance_ms(2) == 32.0 and busy_balance_ms(8) == 128.0  # sd_init: cores ms x busy_factor 16
    with pytest.raises(ValueError):
        busy_balance_ms(0)


def test_an_always_busy_core_halves_every_step_and_an_idle_one_slows_none():
    # background 1 on one core: one whole process there throughout (floor 1, no fraction): 2x, as
    # processor sharing at the mean gives; background 0: nothing visits
    assert _steps(0.004, 50, 1.0, TAU) == pytest.approx(np.full(50, 0.008))
    assert _steps(0.004, 50, 1.0, 0.0) == pytest.approx(np.full(50, 0.008))
    assert _steps(0.004, 50, 0.0, TAU) == pytest.approx(np.full(50, 0.004))


def test_a_visited_core_stalls_some_steps_twice_instead_of_all_a_little():
    """Mean extra load f = 0.25 on the worker's core. At the mean (visit_s = 0) every 1 ms step
    takes 1.25 ms. As visits of 32 ms a quarter of the time: steps take 1 ms or 2 ms; over a long
    run the worker progresses at 1 - f/2 (full speed 3/4 of the time, half 1/4), and the share of
    steps inside a visit is (f/2) / (1 - f/2) = 1/7."""
    w, n, f = 0.001, 20000, 0.25
    steady = _steps(w, n, f, 0.0)
    assert steady == pytest.approx(np.full(n, w * (1 + f)))
    d = _steps(w, n, f, TAU)
    assert d.sum() == pytest.approx(n * w / (1 - f / 2), rel=0.04)
    assert np.mean(d > 1.9 * w) == pytest.approx((f / 2) / (1 - f / 2), abs=0.025)
    assert np.mean(d < 1.01 * w) > 0.8  # most steps meet no visitor at all
    assert np.percentile(d, 95) == pytest.approx(2 * w)  # the tail a mean share never gives


def test_a_long_step_sees_the_mean():
    # 20 s of work against 32 ms visits: it meets hundreds of them, so it takes ~W / (1 - f/2)
    d = _steps(20.0, 1, 0.25, TAU)
    assert d[0] == pytest.approx(20.0 / (1 - 0.25 / 2), rel=0.05)


def test_visits_last_their_mean_and_keep_the_mean_load():
    v = Visits(1, TAU, seed=3)
    v.wake(0, 0.0)
    now, on, spans, start = 0.0, 0.0, [], None
    while now < 200.0:
        at, c = v.next_change(now, [1.4], [True])  # floor 1 always there, a visitor 40% of the time
        if v.present[0]:
            on += at - now
            spans.append(at - start)
        else:
            start = at
        now = at
        v.flip(c)
    assert on / now == pytest.approx(0.4, abs=0.02)
    assert np.mean(spans) == pytest.approx(TAU, rel=0.05)
    assert v.extra([1.4]) in ([1], [2])


def test_an_idle_core_forgets_its_visitor_at_the_chains_own_rate():
    v = Visits(1, TAU, seed=0)
    v.wake(0, 0.0)  # a step runs from t = 0, with a visitor
    v.present[0] = 1
    v.sleep(0, 1.0, 0.0)  # went idle with no load left for it: the visitor leaves within ~TAU
    v.wake(0, 1.0)  # no time idle: unchanged
    assert v.present[0] == 1
    v.sleep(0, 1.0, 0.0)
    v.wake(0, 1.0 + 50 * TAU)  # long idle: P(still there) = e^-50
    assert v.present[0] == 0
    assert math.isinf(v.flip_at[0])


def test_the_same_seed_gives_the_same_steps():
    a, b = _steps(0.002, 3000, 0.3, TAU, seed=1), _steps(0.002, 3000, 0.3, TAU, seed=1)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, _steps(0.002, 3000, 0.3, TAU, seed=2))


def test_a_scenario_with_visits_runs_and_repeats_itself():
    from pdsim.workload.table import RequestTable

    table = RequestTable(np.linspace(0.0, 2.0, 6), np.full(6, 200), np.full(6, 30), source="t")
    sets = ["host.cores=2", "host.placement={colocated: [0]}", "host.background=1.3", "host.visit_ms=32"]
    runs = [api.simulate(api.load_scenario(CPU, sets), table=table) for _ in range(2)]
    assert runs[0].requests["finished"].all()
    assert np.array_equal(runs[0].record.steps[0]["step_s"], runs[1].record.steps[0]["step_s"])
    quiet = api.simulate(api.load_scenario(CPU, sets[:3]), table=table)  # the mean share, no visits
    assert not np.array_equal(quiet.record.steps[0]["step_s"], runs[0].record.steps[0]["step_s"])


@pytest.mark.parametrize("sets, words", [
    (["host.cores=2", "host.placement={colocated: [0]}", "host.visit_ms=-1"], "[0.1, 60000]"),
    (["host.cores=2", "host.placement={colocated: [0]}", "host.visit_ms=.nan"], "finite"),
    # a visit far below the scheduler's time slice makes an event per microsecond of simulated
    # time (1 us visits: 1.9 s of wall time per 2 s simulated on 6 requests; 1 ns: hours)
    (["host.cores=2", "host.placement={colocated: [0]}", "host.visit_ms=0.001"], "0.1"),
    (["host.cores=0", "host.placement={}", "host.visit_ms=32"], "placement"),  # the bundled scenario states a placement
])
def test_bad_visits_are_refused_naming_the_field(sets, words):
    with pytest.raises(SpecError) as err:
        api.load_scenario(CPU, sets)
    assert "visit_ms" in str(err.value) and words in str(err.value)


def test_the_traced_stalls_are_a_shared_core_not_a_bounded_wait():
    """What validation/cpu-vllm/stall_trace.py reads in the committed trace of cpu-vllm-here2-light
    (other sessions' jobs took 1.3 cores): a stalled decode step's worker call is ~1x its batch's
    median longer whatever that median (a core shared for the whole step, not a wait of bounded
    length), stalls follow stalls (visits longer than a step), and the hop back to the engine core
    shows the kernel's 4 ms tick (peaks at 3-3.5 and 7-7.5 ms)."""
    import gzip
    import json

    mod = load_script("validation/cpu-vllm/stall_trace.py")
    loads = json.loads(gzip.decompress((mod.TRACES / "trace5-steps.jsonl.loads.json.gz").read_bytes()))
    out = mod.analyse(mod.steps_of("trace5", tuple(loads["cpu-vllm-here2-light"])))
    for b in out["excess_over_median"].values():
        assert 0.8 <= b["excess/median_p50"] <= 1.6
    c = out["clustering"]
    assert c["P(stalled | before stalled)"] > 10 * c["P(stalled | before not)"]
    h = out["hop2_ms_histogram_0.5ms_bins"]
    assert h[6] > 2 * h[4] and h[14] > 2 * h[12]
    assert 20.0 <= out["visits_ms"]["mean"] <= 45.0  # about the 32 ms busy balance period


def test_stall_trace_refuses_a_span_without_pure_decode_steps():
    """A case whose span holds no pure decode step (a wrong span in the loads file, a prefill-only
    recording) is a one-line error (main: exit 2), not an IndexError from np.percentile."""
    mod = load_script("validation/cpu-vllm/stall_trace.py")
    prefill = {"B": 0, "pf": 100, "t": 0.0, "t_end": 0.1, "hop1": 0.0, "ex": 0.1, "mid": 0.0, "sa": 0.0, "hop2": 0.0}
    for rows in ([], [prefill]):
        with pytest.raises(ValueError, match="no pure decode step"):
            mod.analyse(rows)
