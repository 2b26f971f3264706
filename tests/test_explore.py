"""Sweeps: same rows serially, in a pool and on Ray; Pareto correctness; resume; bad axes."""
from __future__ import annotations

import importlib.util

import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

import pdsim
from pdsim.explore import pareto_mask, run_sweep
from pdsim.specs import SpecError

from builders import scenario_dict

METRIC_COLS = ["goodput_share", "request_goodput", "output_throughput_per_gpu", "p90_ttft_ms", "mean_tpot_ms"]


def write_sweep(tmp_path, axes, **extra) -> str:
    base = scenario_dict("colocated")
    base["workload"]["num_requests"] = 40
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    sweep = {"name": "t", "base": "base.yaml", "axes": axes, **extra}
    p = tmp_path / "sweep.yaml"
    p.write_text(yaml.safe_dump(sweep))
    return str(p)


AXES = [{"field": "cluster.colocated.engine.chunked_prefill_size", "values": [512, 2048]},
        {"field": "workload.rate", "values": [4.0, 16.0]}]


def _rows(df):
    return df.drop(columns=["wall_s"]).reset_index(drop=True)


def test_serial_and_pool_give_identical_rows(tmp_path):
    p = write_sweep(tmp_path, AXES)
    a = run_sweep(p, tmp_path / "a", workers=1, progress=False)
    b = run_sweep(p, tmp_path / "b", workers=2, progress=False)
    assert len(a) == 4 and (a["status"] == "ok").all()
    pd.testing.assert_frame_equal(_rows(a), _rows(b))
    for f in ("results.csv", "results.parquet", "pareto.csv", "pareto_goodput_ttft.csv", "summary.json", "report.html"):
        assert (tmp_path / "a" / f).is_file()
    cfg = next((tmp_path / "a" / "configs").glob("*.yaml"))
    assert pdsim.load_scenario(cfg).scenario.name == "small-colocated"


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray not installed (pip install 'pdsim[ray]')")
def test_ray_gives_the_same_rows(tmp_path):
    p = write_sweep(tmp_path, AXES)
    a = run_sweep(p, tmp_path / "a", workers=1, progress=False)
    r = run_sweep(p, tmp_path / "r", ray=True, progress=False)
    pd.testing.assert_frame_equal(_rows(a), _rows(r))


def test_resume_recomputes_nothing_finished(tmp_path):
    p = write_sweep(tmp_path, AXES)
    out = tmp_path / "o"
    first = run_sweep(p, out, workers=1, progress=False)
    assert first.attrs["computed"] == 4
    # simulate an interrupted run: one cached result lost
    victim = sorted((out / "cache").glob("*.json"))[0]
    victim.unlink()
    again = run_sweep(p, out, workers=1, progress=False)
    assert again.attrs["computed"] == 1
    pd.testing.assert_frame_equal(_rows(first), _rows(again))


def test_infeasible_points_are_recorded_not_crashed(tmp_path):
    axes = [{"field": "cluster.colocated.engine.max_total_tokens", "values": [100, 50_000]}]
    df = run_sweep(write_sweep(tmp_path, axes), tmp_path / "o", workers=1, progress=False)
    bad = df[df["status"] == "infeasible"]
    assert len(bad) == 1 and "does not fit" in bad.iloc[0]["reason"]


def test_constraints_skip_oversized_configurations(tmp_path):
    axes = [{"field": "cluster.colocated.count", "values": [1, 3]}]
    df = run_sweep(write_sweep(tmp_path, axes, constraints={"max_gpus": 2}), tmp_path / "o", workers=1, progress=False)
    assert list(df["status"]) == ["ok", "infeasible"] and "max_gpus" in df.iloc[1]["reason"]


@pytest.mark.parametrize("axis, expect", [
    ({"field": "cluster.colocated.engine.bogus", "values": [1]}, "axes[0]"),
    ({"field": "cluster.colocated.engine.page_size", "values": ["big"]}, "axes[0]"),
    ({"field": "workload.rate", "values": [-1.0]}, "axes[0]"),
])
def test_bad_axes_fail_before_any_simulation(tmp_path, axis, expect):
    p = write_sweep(tmp_path, [axis])
    with pytest.raises(SpecError) as ei:
        run_sweep(p, tmp_path / "o", workers=1, progress=False)
    assert expect in str(ei.value) and "sweep.yaml" in str(ei.value)
    assert not list((tmp_path / "o" / "cache").glob("*.json")) if (tmp_path / "o").exists() else True


def test_max_rate_search_brackets_the_slo_threshold(tmp_path):
    p = write_sweep(tmp_path, [{"field": "cluster.colocated.engine.chunked_prefill_size", "values": [2048]}],
                    search={"mode": "max_rate", "low": 1.0, "high": 3000.0, "tolerance": 0.1, "target_goodput": 0.9},
                    set={"workload.num_requests": 400})
    df = run_sweep(p, tmp_path / "o", workers=1, progress=False)
    r = float(df.iloc[0]["max_rate"])
    assert 1.0 < r < 3000.0
    assert df.iloc[0]["goodput_share"] >= 0.9


def test_pareto_hand_built_case():
    pts = np.array([[1, 5], [2, 4], [3, 3], [2, 2], [1, 1], [3, 3]])
    m = pareto_mask(pts, [True, True])
    assert list(m) == [True, True, True, False, False, True]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 20)), min_size=1, max_size=30))
def test_pareto_frontier_is_non_dominated_and_complete(points):
    p = np.array(points, dtype=float)
    m = pareto_mask(p, [True, False])  # maximise x, minimise y
    q = p * np.array([1, -1])
    for i in range(len(p)):
        dominated = any((q[j] >= q[i]).all() and (q[j] > q[i]).any() for j in range(len(p)))
        assert m[i] == (not dominated)
