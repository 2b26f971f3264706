"""pdsim validate --step-speed: every step's price scaled, the band and elasticity per metric, the mark.

The phenomenon (near a knee a small step-price error is amplified) is the one costs/host_load.py
names for cpu-vllm-here-trace-knee; the drift the band is drawn at is the CPU host's own, measured
in the step trace of cpu-vllm-zen1c-prefix-knee (validation/cpu-vllm-calibration/zen1c/step-traces,
validation/cpu-vllm/step_compare.py --case: real step time over price by thirds of the recording,
0.96-0.99 with prefill, 0.91-1.05 pure decode).
"""
from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from pdsim import api
from pdsim.cli import main
from pdsim.ingest import read_run
from pdsim.validate.align import simulate_aligned
from pdsim.validate.case import run_case
from pdsim.validate.compare import Row
from pdsim.validate.step_speed import with_step_band

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "workloads" / "scenarios" / "cpu-vllm-tiny-llama.yaml"
LIGHT = ROOT / "validation" / "cpu-vllm-zen1c-prefix-light"
KNEE = ROOT / "validation" / "cpu-vllm-zen1c-prefix-knee"


def _steps(sc):
    ing = read_run(LIGHT / "real" / "bench.json")
    al = simulate_aligned(ing.record, sc)
    cols = al.sim.record.steps[0]
    return np.asarray(cols["step_s"], float), np.asarray(cols["prefill_tokens"]), np.asarray(cols["running_batch"])


def test_price_scale_scales_every_step_of_the_same_work():
    """The first step of a run (the same work whatever the scale: one prompt's first chunk) takes
    exactly ``price_scale`` times as long; the probe changes prices, not what a step carries."""
    sc = api.load_scenario(SCENARIO)
    d1, pf1, n1 = _steps(sc)
    d2, pf2, n2 = _steps(dataclasses.replace(sc, price_scale=1.1))
    assert pf1[0] == pf2[0] and n1[0] == n2[0]
    assert d2[0] == pytest.approx(1.1 * d1[0], rel=1e-12)


def _row(real, sim, fast, slow, tol=0.2, verdict="FAIL"):
    return Row("mean_itl_ms", real, sim, (sim - real) / real, tol, verdict, step_fast=fast, step_slow=slow)


def test_the_mark_says_whether_the_band_reaches_the_tolerance_window():
    assert _row(100, 125, 95, 160).in_step_band  # the faster end lands inside ±20%
    assert _row(100, 125, 119.9, 160).in_step_band
    assert not _row(100, 125, 121, 160).in_step_band  # both ends above 120
    assert not _row(100, 60, 50, 79).in_step_band  # both ends below 80
    assert _row(100, 60, 50, 80).in_step_band
    assert not Row("mean_itl_ms", 100, 125, 0.25, 0.2, "FAIL").in_step_band  # not drawn
    assert _row(100, 125, 100, 150).step_elasticity(0.05) == pytest.approx(50 / (0.1 * 125))


def test_a_knee_is_several_times_as_sensitive_to_the_step_price_as_a_light_load():
    """Same host, same workload, same profile: at 0.3x the priced capacity mean TTFT moves about
    as much as the step price; at 0.8x (the knee) several times as much, and the knee's failing
    ITL metrics come within their tolerance with every step 5% faster, the drift the host showed
    in that very recording."""
    light = run_case(LIGHT, step_speed=0.05)
    knee = run_case(KNEE, step_speed=0.05)
    el = {c.name: {r.metric: r.step_elasticity(0.05) for r in c.rows} for c in (light, knee)}
    assert el[light.name]["mean_ttft_ms"] < 2.0
    assert el[knee.name]["mean_ttft_ms"] > 3.0 and el[knee.name]["mean_itl_ms"] > 3.0
    for c in (light, knee):  # slower steps never make the run faster
        for r in c.rows:
            if r.metric.endswith("_ms") and r.step_fast is not None:
                assert r.step_fast <= r.simulated <= r.step_slow, (c.name, r.metric)
    bad = [r for r in knee.rows if r.verdict == "FAIL"]
    assert bad and all(r.in_step_band for r in bad)


def test_the_band_leaves_the_verdicts_as_they_are():
    sc = api.load_scenario(SCENARIO)
    ing = read_run(LIGHT / "real" / "bench.json")
    from pdsim.validate.compare import compare

    al = simulate_aligned(ing.record, sc)
    rows, _ = compare(al.real, al.sim, {"mean_itl_ms": 1e-6}, al.pairs)
    banded = with_step_band(rows, ing.record, sc, 0.05)
    assert [(r.metric, r.simulated, r.verdict) for r in rows] == [(r.metric, r.simulated, r.verdict) for r in banded]
    assert all(r.step_fast is not None for r in banded if r.metric.endswith("_ms"))


def test_cli_step_speed_on_a_case_and_on_the_page(tmp_path, capsys):
    assert main(["validate", str(LIGHT), "--step-speed", "5"]) in (0, 3)
    out = capsys.readouterr().out
    assert "every step ∓5%" in out and "elasticity" in out
    for bad in ("-5", "60", "nan"):
        assert main(["validate", str(LIGHT), "--step-speed", bad]) == 2
        err = capsys.readouterr().err
        assert "--step-speed" in err and "internal failure" not in err
    cases = tmp_path / "cases"
    dst = cases / "light"
    shutil.copytree(LIGHT, dst)
    c = yaml.safe_load((dst / "case.yaml").read_text())
    c["scenario"] = str(SCENARIO)
    c["set"] = [s.replace("../../validation", str(ROOT / "validation")) for s in c.get("set") or []]
    c["steps"] = [str(LIGHT / s) for s in c.get("steps") or []]  # its step traces, from the copy's folder
    c["tolerances"] = {"mean_itl_ms": 1e-6}
    (dst / "case.yaml").write_text(yaml.safe_dump(c))
    docs = tmp_path / "docs" / "validation.md"
    assert main(["validate", "--all", str(cases), "--docs", str(docs), "--step-speed", "5"]) == 3
    text = docs.read_text()
    assert "--step-speed 5" in text and "simulated, every step ∓5% |" in text
    assert "failing metrics would pass were every step 5% faster or slower" in text
    assert "failing cases pass whole with every step 5% faster or every step 5% slower" in text
