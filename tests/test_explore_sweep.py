"""Sweeps end to end: identical rows serially and in a pool, outputs, infeasible points,
constraints, unexpected failures, compare."""
from __future__ import annotations

import json

import pandas as pd
import yaml

import pdsim
from pdsim.explore import compare, run_sweep
from pdsim.explore.cli import compare_command, sweep_command

from builders import scenario_dict

AXES = [{"field": "cluster.colocated.engine.chunked_prefill_size", "values": [512, 2048]},
        {"field": "workload.rate", "values": [4.0, 16.0]}]


def write_sweep(tmp_path, axes, base=None, **extra) -> str:
    base = base or scenario_dict("colocated")
    base["workload"]["num_requests"] = 40
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    p = tmp_path / "sweep.yaml"
    p.write_text(yaml.safe_dump({"name": "t", "base": "base.yaml", "axes": axes, **extra}))
    return str(p)


def rows(df: pd.DataFrame) -> pd.DataFrame:
    return df.drop(columns=["eval_wall_s"]).reset_index(drop=True)


def test_serial_and_pool_give_identical_rows_and_all_outputs(tmp_path):
    p = write_sweep(tmp_path, AXES)
    a = run_sweep(p, tmp_path / "a", workers=1, progress=False)
    b = run_sweep(p, tmp_path / "b", workers=2, progress=False)
    assert len(a) == 4 and (a["status"] == "ok").all()
    assert a.attrs["computed"] == 4 and a.attrs["cached"] == 0
    pd.testing.assert_frame_equal(rows(a), rows(b))
    out = tmp_path / "a"
    for f in ("results.csv", "results.parquet", "pareto.csv", "pareto_goodput_ttft.csv", "summary.json",
              "report.html"):
        assert (out / f).is_file(), f
    # knobs in grid order, metrics present
    assert list(a["workload.rate"]) == [4.0, 16.0, 4.0, 16.0]
    for col in ("config_id", "layout", "goodput_share", "request_goodput", "output_throughput_per_gpu",
                "tokens_per_s_per_user", "p90_ttft_ms", "p99_itl_ms", "p90_tpot_ms", "pareto"):
        assert col in a
    assert (a["tokens_per_s_per_user"] - 1000.0 / a["mean_tpot_ms"]).abs().max() < 1e-9
    pq = pd.read_parquet(out / "results.parquet")
    assert list(pq["config_id"]) == list(a["config_id"])
    # every configuration's scenario is a loadable file
    for cid in a["config_id"]:
        assert pdsim.load_scenario(out / "configs" / f"{cid}.yaml").scenario.name == "small-colocated"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["configurations"] == 4 and summary["ok"] == 4
    assert summary["workload_groups"] == ["workload.rate=4", "workload.rate=16"]
    for rate in (4, 16):  # the best is chosen per offered rate, among configurations meeting the SLO
        group = a[(a["workload.rate"] == rate) & a["meets_slo"]]
        best = summary["best"].get(f"request_goodput [workload.rate={rate}]")
        if group.empty:
            assert best is None
        else:
            assert best["config_id"] == group.loc[group["request_goodput"].idxmax(), "config_id"]
    assert set(summary["pareto"]) == set(a.loc[a["pareto"], "config_id"])
    html = (out / "report.html").read_text()
    assert "plotly" in html.lower() and "Pareto frontier" in html and len(html) > 1_000_000  # plotly.js inlined


def test_infeasible_points_are_recorded_not_crashed(tmp_path):
    axes = [{"field": "cluster.colocated.engine.max_total_tokens", "values": [100, 50_000]}]
    df = run_sweep(write_sweep(tmp_path, axes), tmp_path / "o", workers=1, progress=False)
    assert list(df["status"]) == ["infeasible", "ok"]
    assert "below min_kv_reserve_tokens" in df.iloc[0]["reason"] and "cluster.colocated[0]" in df.iloc[0]["reason"]
    assert df.attrs["computed"] == 1


def test_constraints_skip_oversized_configurations(tmp_path):
    axes = [{"field": "cluster.colocated.count", "values": [1, 3]}]
    df = run_sweep(write_sweep(tmp_path, axes, constraints={"max_gpus": 2}), tmp_path / "o", workers=1,
                   progress=False)
    assert list(df["status"]) == ["ok", "infeasible"] and "max_gpus 2" in df.iloc[1]["reason"]
    assert list(df["gpus"]) == [1, 3]
    df = run_sweep(write_sweep(tmp_path, axes, constraints={"max_nodes": 0.25}), tmp_path / "n", workers=1,
                   progress=False)
    assert list(df["status"]) == ["ok", "infeasible"] and "max_nodes" in df.iloc[1]["reason"]


def test_linked_axes_move_together_and_layouts_are_named(tmp_path):
    axes = [{"name": "shape", "linked": {"cluster.prefill.gpus": [1, 2], "cluster.prefill.tp": [1, 2]}},
            {"field": "cluster.decode.count", "values": [1, 2]}]
    df = run_sweep(write_sweep(tmp_path, axes, base=scenario_dict("disagg")), tmp_path / "o", workers=1,
                   progress=False)
    assert len(df) == 4 and (df["status"] == "ok").all()
    assert list(zip(df["cluster.prefill.gpus"], df["cluster.prefill.tp"])) == [(1, 1), (1, 1), (2, 2), (2, 2)]
    assert list(df["layout"]) == ["P1gD1g", "P1g(D2x1g)", "P2gD1g", "P2g(D2x1g)"]
    assert list(df["gpus"]) == [2, 3, 3, 4]


def test_unexpected_failures_are_rows_and_retried(tmp_path, monkeypatch):
    import pdsim.explore.search as search

    real = search.simulate_metrics

    def flaky(data, base_dir, trust=None):
        if data["workload"]["rate"] == 16.0:
            raise RuntimeError("boom")
        return real(data, base_dir, trust=trust)

    monkeypatch.setattr(search, "simulate_metrics", flaky)
    p = write_sweep(tmp_path, AXES)
    df = run_sweep(p, tmp_path / "o", workers=1, progress=False)
    assert list(df["status"]) == ["ok", "error", "ok", "error"] and "RuntimeError: boom" in df.iloc[1]["reason"]
    monkeypatch.setattr(search, "simulate_metrics", real)
    again = run_sweep(p, tmp_path / "o", workers=1, progress=False)
    assert again.attrs["computed"] == 2 and again.attrs["cached"] == 2 and (again["status"] == "ok").all()


def test_sweep_command_prints_a_readable_table(tmp_path, capsys):
    p = write_sweep(tmp_path, AXES)
    assert sweep_command(p, str(tmp_path / "o"), workers=1) == 0
    text = capsys.readouterr().out
    assert "4 configurations" in text and "best per objective" in text and "tok/s/GPU" in text
    bad = write_sweep(tmp_path, [{"field": "workload.rte", "values": [1]}])
    assert sweep_command(bad, str(tmp_path / "x")) == 2
    assert "axes[0] workload.rte" in capsys.readouterr().err


def test_compare_runs_the_first_workload_through_every_scenario(tmp_path, capsys):
    a, b = scenario_dict("colocated"), scenario_dict("disagg")
    b["workload"]["num_requests"] = 999  # replaced by the first scenario's workload
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(a))
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(b))
    paths = [str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml")]
    df = compare(paths, tmp_path / "c", overrides=["workload.num_requests=30"])
    assert list(df["scenario"]) == ["small-colocated", "small-disagg"]
    assert list(df["completed"] + df["dropped"]) == [30, 30]
    assert list(df["gpus"]) == [1, 2]
    assert (tmp_path / "c" / "compare.csv").is_file() and (tmp_path / "c" / "compare.html").stat().st_size > 1e6
    assert compare_command(paths, None, ["workload.num_requests=30"]) == 0
    assert "small-disagg" in capsys.readouterr().out
    assert compare_command([str(tmp_path / "nope.yaml")], None) == 2
