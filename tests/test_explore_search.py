"""Max sustainable rate: bisection on the rate against a goodput share or percentile SLO."""
from __future__ import annotations

import math

import pytest
import yaml

from pdsim.explore import max_sustainable_rate, meets_target, run_sweep

from builders import scenario_dict

EV = {"mode": "max_rate", "rate_field": "workload.rate", "low": 1.0, "high": 64.0, "tolerance": 0.02,
      "target_goodput": 0.9, "limits": {}, "increasing": True}


@pytest.fixture
def fake_sim(monkeypatch):
    """A system whose goodput collapses above 7.3 req/s and whose p90 TTFT is 100 ms x rate."""
    import pdsim.explore.search as search

    calls = []

    def sim(data, base_dir, trust=None):
        wl = data["workload"]
        load = wl["rate"] if "rate" in wl else 1.0 / wl["trace"]["time_scale"]
        calls.append(load)
        return {"goodput_share": 1.0 if load <= 7.3 else 0.5, "p90_ttft_ms": 100.0 * load, "p90_itl_ms": None}

    monkeypatch.setattr(search, "simulate_metrics", sim)
    return calls


def test_bisection_finds_the_threshold_within_tolerance(fake_sim):
    r = max_sustainable_rate({"workload": {"rate": 1.0}}, ".", EV)
    assert r["max_rate"] <= 7.3 < r["max_rate"] * (1 + EV["tolerance"])
    assert r["goodput_share"] == 1.0 and r["search_note"] is None
    assert r["probes"] == len(fake_sim) <= 2 + math.ceil(math.log2(math.log(64) / math.log(1.02))) + 1


def test_percentile_limits(fake_sim):
    ev = {**EV, "target_goodput": None, "limits": {"p90_ttft_ms": 500.0}}
    r = max_sustainable_rate({"workload": {"rate": 1.0}}, ".", ev)
    assert r["max_rate"] <= 5.0 < r["max_rate"] * 1.02
    both = {**EV, "limits": {"p90_ttft_ms": 1000.0}}  # goodput binds first (7.3 < 10)
    assert max_sustainable_rate({"workload": {"rate": 1.0}}, ".", both)["max_rate"] <= 7.3
    assert not meets_target({"goodput_share": 1.0, "p90_itl_ms": None}, {**EV, "limits": {"p90_itl_ms": 50}})


def test_bounds(fake_sim):
    low = max_sustainable_rate({"workload": {"rate": 1.0}}, ".", {**EV, "low": 10.0, "high": 20.0})
    assert low["max_rate"] == 0.0 and "not met even at" in low["search_note"] and low["probes"] == 1
    high = max_sustainable_rate({"workload": {"rate": 1.0}}, ".", {**EV, "low": 1.0, "high": 5.0})
    assert high["max_rate"] == 5.0 and "widen" in high["search_note"] and high["probes"] == 2


def test_decreasing_field_such_as_a_trace_time_scale(fake_sim):
    ev = {**EV, "rate_field": "workload.trace.time_scale", "low": 0.01, "high": 10.0, "increasing": False}
    r = max_sustainable_rate({"workload": {"trace": {"time_scale": 1.0}}}, ".", ev)
    assert 1 / r["max_rate"] <= 7.3 < 1.02 / r["max_rate"]  # the smallest scale that holds


def test_max_rate_sweep_end_to_end(tmp_path):
    base = scenario_dict("colocated")
    base["workload"]["num_requests"] = 120
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    sweep = {"base": "base.yaml", "axes": [{"field": "cluster.colocated.engine.chunked_prefill_size",
                                            "values": [512, 2048]}],
             "search": {"mode": "max_rate", "low": 1.0, "high": 2000.0, "tolerance": 0.2,
                        "target_goodput": 0.9, "limits": {"p90_ttft_ms": 300}}}
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(sweep))
    df = run_sweep(tmp_path / "sweep.yaml", tmp_path / "o", workers=2, progress=False)
    assert (df["status"] == "ok").all()
    for _i, r in df.iterrows():
        assert 1.0 < r["max_rate"] < 2000.0 and r["goodput_share"] >= 0.9 and r["p90_ttft_ms"] <= 300
        assert r["max_rate_per_gpu"] == r["max_rate"] and r["probes"] >= 3
    summary = yaml.safe_load((tmp_path / "o" / "summary.json").read_text())
    assert "max_rate_per_gpu" in summary["best"]
