"""Step-time dispersion (sim/engine/dispersion.py): a step of one shape takes its price times a
factor of mean 1 whose spread and phase length are measured with the CPU profile.

The phenomenon: on the CPU validation host, with the client reading every token when it came
(SCHED_FIFO), a pinned vLLM worker's batch-1 decode steps ran 5.2 / 6.8 / 8.3 ms at p10 / p50 /
p90 (CV 0.20 around their context trend, lag-1 correlation 0.69; validation/README.md, "Step
dispersion", from validation/cpu-vllm-calibration/fifo/step-traces), while every simulated step of
one shape took its price: the simulated p90 ITL at light load came out 21-32% under the real one.
"""
from __future__ import annotations

import argparse
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from pdsim import api
from pdsim.sim.engine.dispersion import StepDispersion, instant_cv, window_share
from pdsim.specs.errors import SpecError
from pdsim.specs.hardware import Efficiency

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "workloads/scenarios/cpu-vllm-tiny-llama.yaml"
MICRO = ROOT / "calibration" / "microbench"


def _factors(cv: float, tau_s: float, dt: float, n: int, seed: int = 7) -> np.ndarray:
    d = StepDispersion(cv, tau_s, seed)
    return np.array([d.factor(dt) for _ in range(n)])


@pytest.mark.parametrize("tau_s", [0.0, 0.05, 5.0])
def test_the_factor_keeps_the_mean_and_a_short_step_has_the_stated_spread(tau_s):
    f = _factors(0.2, tau_s, 0.007, 200_000)
    assert abs(f.mean() - 1.0) < 0.01  # prices keep their mean
    # a step as short as tau or shorter sees about one phase: CV cv sqrt(g(dt / tau))
    want = 0.2 * math.sqrt(window_share(0.007 / tau_s)) if tau_s else 0.2
    assert abs(f.std() / f.mean() - want) < 0.006


@pytest.mark.parametrize("dt", [0.03, 0.5, 2.0])
def test_a_long_step_averages_the_phases_it_spans(dt):
    """The validation host's 512-token prefill steps (~0.5 s, ~20 phases of ~25 ms) varied by a
    few percent while its batch-1 decode steps varied by 16% (step traces of
    validation/cpu-vllm-calibration/fifo3; validation/README.md, "Step dispersion"): a step's
    factor is the phase's average over the step, CV ~ cv sqrt(2 tau / T) for T >> tau."""
    f = _factors(0.16, 0.025, dt, 100_000)
    assert abs(f.mean() - 1.0) < 0.005
    u = dt / 0.025
    want = math.sqrt(math.expm1(math.log1p(0.16 ** 2) * window_share(u)))
    assert abs(f.std() - want) < 0.05 * want
    if u > 10:
        assert f.std() < 0.16 * math.sqrt(2.0 / u) * 1.05


def test_phases_last_as_long_as_tau_says():
    f = np.log(_factors(0.2, 0.07, 0.007, 100_000))
    lag1 = np.corrcoef(f[:-1], f[1:])[0, 1]
    lag10 = np.corrcoef(f[:-10], f[10:])[0, 1]
    # adjacent step averages of an OU phase: cov (1 - a)^2 a^(k-1) / u^2 over the average's g(u)
    u, a = 0.1, math.exp(-0.1)
    assert abs(lag1 - (1 - a) ** 2 / u ** 2 / window_share(u)) < 0.02
    assert abs(lag10 - (1 - a) ** 2 * a ** 9 / u ** 2 / window_share(u)) < 0.03
    assert lag1 > lag10 > 0.3  # a slow step is followed by slow steps
    g = np.log(_factors(0.2, 0.0, 0.007, 100_000))
    assert abs(np.corrcoef(g[:-1], g[1:])[0, 1]) < 0.02  # tau 0: independent steps


@settings(max_examples=30, deadline=None)
@given(cv=st.floats(0.0, 1.9), tau=st.floats(0.0, 1.0), dt=st.floats(1e-6, 10.0), seed=st.integers(0, 2**31))
def test_factors_are_positive_finite_and_deterministic_by_seed(cv, tau, dt, seed):
    a, b = _factors(cv, tau, dt, 20, seed), _factors(cv, tau, dt, 20, seed)
    assert np.all(a > 0) and np.all(np.isfinite(a))
    assert np.array_equal(a, b)


def test_no_dispersion_without_a_cv_and_bad_values_name_the_field():
    assert StepDispersion.of(Efficiency(), 1) is None
    with pytest.raises(SpecError, match="step_cv"):
        Efficiency(step_cv=2.0)
    with pytest.raises(SpecError, match="step_cv_tau_ms"):
        Efficiency(step_cv_tau_ms=-1.0)


def _run(tmp_path: Path, **eff):
    doc = yaml.safe_load((ROOT / "hardware_profiles" / "cpu-epyc-2c.yaml").read_text())
    doc["efficiency"].update(eff)
    hw = tmp_path / f"hw-{len(eff)}.yaml"
    hw.write_text(yaml.safe_dump(doc))
    sc = api.load_scenario(SCENARIO, ["workload.num_requests=150", "workload.rate=0.5", f"hardware={hw}"])
    s = api.simulate(sc).summary()
    s.pop("wall_s")  # the simulator's own time, not a result
    return s


def test_dispersion_widens_the_itl_tail_and_keeps_its_mean(tmp_path):
    base = _run(tmp_path)
    spread = _run(tmp_path, step_cv=0.2, step_cv_tau_ms=20.0)
    assert spread["completed"] == base["completed"] == 150  # no request lost
    assert abs(spread["mean_itl_ms"] / base["mean_itl_ms"] - 1.0) < 0.05
    assert spread["p90_itl_ms"] > 1.08 * base["p90_itl_ms"]
    assert _run(tmp_path, step_cv=0.2, step_cv_tau_ms=20.0) == spread  # determinism by seed


def test_the_overhead_runs_measure_cv_and_phase_length():
    sys.path.insert(0, str(MICRO))
    try:
        from cpu_overhead import dispersion
    finally:
        sys.path.remove(str(MICRO))
    rng = np.random.default_rng(3)
    runs = {}
    for shape, mean in (((1, 32), 0.006), ((4, 32), 0.011)):
        reps = []
        for _ in range(4):
            x, g = 0.0, []
            for _ in range(60):  # AR(1), rho 0.7, stationary CV of the log 0.2
                x = 0.7 * x + math.sqrt(1 - 0.49) * 0.2 * rng.standard_normal()
                g.append(mean * math.exp(x))
            reps.append(np.array(g))
        runs[shape] = reps
    d = dispersion(runs)
    assert 0.12 < d["cv"] < 0.3 and d["zero_gap_share"] == 0.0
    assert abs(d["step_ms"] - 8.5) < 1.0  # the mean length of the steps it was measured on
    assert d["lag_correlations"][0] > 0.4 and d["tau_ms"] > 0.006 * 1e3  # longer than one step
    runs[(1, 32)][0][::5] = 0.0  # a client that read several tokens at once
    assert dispersion(runs)["zero_gap_share"] > 0.02


def test_the_profile_writes_the_dispersion_only_when_the_client_saw_each_step(tmp_path):
    rows = ROOT / "validation" / "cpu-vllm-calibration" / "newuser"
    for f in ("machine.json", "gemm.csv", "attention.csv", "overhead.json"):
        shutil.copy(rows / f, tmp_path / f)
    sys.path.insert(0, str(MICRO))
    try:
        from cpu_profile_fit import profile
    finally:
        sys.path.remove(str(MICRO))
    import json

    ov = json.loads((tmp_path / "overhead.json").read_text())
    out = tmp_path / "p.yaml"
    args = argparse.Namespace(out=str(tmp_path), model=str(ROOT / "workloads/models/tiny-llama.yaml"), name="cpu-t",
                              yaml=str(out), fresh=True, bounds="")
    for zeros, written in ((0.0, True), (0.15, False)):
        ov["dispersion"] = {"cv": 0.2, "cv_within": 0.18, "cv_between": 0.09, "tau_ms": 25.0,
                            "lag_correlations": [0.7, 0.5], "gaps": 600, "zero_gap_share": zeros}
        (tmp_path / "overhead.json").write_text(json.dumps(ov))
        profile(args)
        doc = yaml.safe_load(out.read_text())
        assert ("step_cv" in doc["efficiency"]) is written
        if written:  # the within-run spread of 15 ms steps (tau 25 ms) is less than the instantaneous one
            cv = doc["efficiency"]["step_cv"]
            assert cv == round(instant_cv(0.18, 0.09, 25.0 / 1.7 * 1e-3, 0.025), 4) and 0.2 < cv < 0.22
            assert doc["efficiency"]["step_cv_tau_ms"] == 25.0
            assert doc["sources"]["efficiency.step_cv"].startswith("measured")
            api.load_scenario(SCENARIO, [f"hardware={out}"])  # the profile loads with it


@pytest.mark.parametrize("field, value, says", [("step_cv", "3.0", "in [0, 2)"), ("step_cv_tau_ms", "-1", ">= 0"),
                                                ("step_cv", "'x'", "step_cv")])
def test_a_profile_with_a_bad_dispersion_is_refused_in_one_line(tmp_path, capsys, field, value, says):
    from pdsim.cli import main

    doc = (ROOT / "validation/cpu-vllm-calibration/fifo2/cpu-epyc-2c.yaml").read_text()
    hw = tmp_path / "bad.yaml"
    hw.write_text(doc.replace(f"\n  {field}: ", f"\n  {field}: {value} #", 1))
    rc = main(["run", str(SCENARIO), "--set", f"hardware={hw}", "--set", "workload.num_requests=3", "--no-progress",
               "--no-report", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert str(hw) in lines[0] and f"efficiency.{field}" in lines[0] and says in lines[0], lines[0]
