"""Sweeps and compare under bad input and at scale (issue 10), and what they report (issue 16):
size caps counted before building, clean CLI errors, the cache key and torn cache files, trust
for plug-ins, SLO-aware per-workload frontiers and best configurations, heatmap axes, the
compare table and log axes, the bundled max-rate example."""
from __future__ import annotations

import json
import re
import sys
import time

import numpy as np
import pandas as pd
import pytest
import yaml

import pdsim
from pdsim.cli import main
from pdsim.explore import plan_sweep, run_sweep
from pdsim.explore.plan import sample_combinations
from pdsim.explore.spec import METRICS, ObjectiveSpec
from pdsim.explore.select import best_per_objective, frontier_table, mark
from pdsim.report.sweep_figures import (compare_figure, heatmap_axes, html_table, log_axes_where_runs_differ,
                                        pareto_figure)
from pdsim.specs import SpecError
from pdsim.specs.catalog import workloads_dir
from pdsim.specs.trust import Trust

from builders import scenario_dict

RATE = {"field": "workload.rate", "values": [4.0, 16.0]}
CHUNK = {"field": "cluster.colocated.engine.chunked_prefill_size", "values": [512, 2048]}


def write(tmp_path, sweep: dict, base=None, n: int = 30) -> str:
    base = base or scenario_dict("colocated")
    base["workload"]["num_requests"] = n
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    p = tmp_path / "sweep.yaml"
    p.write_text(yaml.safe_dump({"name": "t", "base": "base.yaml", **sweep}))
    return str(p)


@pytest.fixture
def no_simulation(monkeypatch):
    import pdsim.explore.search as search

    calls = []
    monkeypatch.setattr(search, "simulate_metrics", lambda *a, **k: calls.append(a) or {})
    return calls


# ------------------------------------------------------------------ sizes, counted first

def test_a_tiny_step_is_refused_before_any_value_is_built(tmp_path, no_simulation):
    # W15: range {start: 1, stop: 2, step: 1e-9} was a MemoryError (7.45 GiB)
    p = write(tmp_path, {"axes": [{"field": "workload.rate", "range": {"start": 1, "stop": 2, "step": 1e-9}}]})
    t0 = time.perf_counter()
    with pytest.raises(SpecError, match=r"sweep.yaml: axes\[0\].range.step: the range gives 1,000,000,000 values; an "
                                        r"axis takes at most 100,000"):
        run_sweep(p, tmp_path / "o", workers=1, progress=False)
    assert time.perf_counter() - t0 < 2 and no_simulation == [] and not (tmp_path / "o").exists()


def test_a_huge_grid_is_counted_and_refused_and_the_cap_can_be_raised(tmp_path, no_simulation):
    # W16: a 200^3 grid ran 48 s into a chained MemoryError
    big = [{"field": f, "range": {"start": 1, "stop": 200, "num": 200}} for f in
           ("workload.rate", "cluster.colocated.engine.max_running_requests", "cluster.colocated.engine.page_size")]
    t0 = time.perf_counter()
    with pytest.raises(SpecError, match=r"sweep.yaml: axes: the axes give 8,000,000 configurations "
                                        r"\(200 x 200 x 200\); "
                                        r"a sweep runs at most 10,000 .* raise max_configurations in the sweep file"):
        plan_sweep(write(tmp_path, {"axes": big}))
    assert time.perf_counter() - t0 < 2
    four = [RATE, CHUNK]
    with pytest.raises(SpecError, match="the axes give 4 configurations \\(2 x 2\\); a sweep runs at most 3"):
        plan_sweep(write(tmp_path, {"axes": four, "max_configurations": 3}))
    assert len(plan_sweep(write(tmp_path, {"axes": four, "max_configurations": 4})).configs) == 4
    # random mode counts its samples, not the grid
    plan = plan_sweep(write(tmp_path, {"axes": big, "search": {"mode": "random", "samples": 5, "seed": 3}}))
    assert len(plan.configs) == 5 and len({c.config_id for c in plan.configs}) == 5
    with pytest.raises(SpecError, match=r"search.samples: 20,000 samples; a sweep runs at most 10,000"):
        plan_sweep(write(tmp_path, {"axes": big, "search": {"mode": "random", "samples": 20_000}}))


def test_random_combinations_of_grids_beyond_int64():
    sizes = [10**6] * 4  # 1e24 combinations: more than numpy's integers hold
    picks = sample_combinations(sizes, 50, seed=1)
    assert len(set(picks)) == 50 and picks == sorted(picks)
    assert all(0 <= i < 10**6 for p in picks for i in p)
    assert sample_combinations(sizes, 50, seed=1) == picks  # deterministic by seed
    assert sample_combinations([2, 3], 10, seed=0) == [(a, b) for a in range(2) for b in range(3)]
    assert sample_combinations([], 5, seed=0) == [()]


@pytest.mark.parametrize("sweep, expect", [
    ({"axes": [RATE], "constraints": {"max_gpus": 0}}, "constraints.max_gpus: must be >= 1"),  # W06 (KeyError)
    ({"axes": [{"field": "workload.rate", "range": {"start": 4, "stop": 1, "step": 1}}]},  # W05
     "axes[0].range.stop: must be >= start (4.0)"),
    ({"axes": [{"field": "workload.rate", "range": {"start": 0, "stop": 4, "num": 3, "log": True}}]},  # W25
     "axes[0].range.start: a log range needs start > 0"),
    ({"axes": [RATE], "slo": {"ttft_ms": -1}}, "slo.ttft_ms: must be > 0"),  # W18
    ({"axes": [RATE], "report": {"heatmap": {"x": "workload.rat", "y": "layout"}}},
     "report.heatmap.x: 'workload.rat' is not an axis of this sweep (did you mean 'workload.rate'?)"),
    ({"axes": [RATE], "report": {"heatmap": {"x": "workload.rate"}}}, "report.heatmap.y: give both x and y"),
    ({"axes": [RATE], "report": {"heatmap": {"metric": "goodput"}}}, "report.heatmap.metric: unknown metric"),
    ({"axes": [RATE], "max_configurations": 0}, "max_configurations: must be >= 1"),
])
def test_sweep_file_errors_the_review_found(tmp_path, no_simulation, sweep, expect):
    with pytest.raises(SpecError) as ei:
        run_sweep(write(tmp_path, sweep), tmp_path / "o", workers=1, progress=False)
    assert str(ei.value).startswith(str(tmp_path / "sweep.yaml") + ": ") and expect in str(ei.value), str(ei.value)
    assert no_simulation == []


def test_every_configuration_infeasible_still_writes_the_outputs(tmp_path):
    # W06's KeyError came from tables without a single simulated row
    p = write(tmp_path, {"axes": [RATE], "set": {"cluster.colocated.count": 2}, "constraints": {"max_gpus": 1}})
    df = run_sweep(p, tmp_path / "o", workers=1, progress=False)
    assert list(df["status"]) == ["infeasible", "infeasible"] and not df["meets_slo"].any()
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["best"] == {} and summary["pareto"] == [] and summary["infeasible_reasons"] == {
        "2 GPUs > max_gpus 1": 2}
    assert (tmp_path / "o" / "report.html").stat().st_size > 1000


# ------------------------------------------------------------------ CLI arguments

def test_cli_workers_and_out_are_checked_before_simulating(tmp_path, capsys, no_simulation):
    p = write(tmp_path, {"axes": [RATE]})
    with pytest.raises(SystemExit) as ei:  # W19: --workers -1 was accepted
        main(["sweep", p, "--out", str(tmp_path / "o"), "--workers", "-1"])
    assert ei.value.code == 2 and "argument --workers: expected an integer >= 1, got -1" in capsys.readouterr().err
    with pytest.raises(SpecError, match="--workers: expected an integer >= 1"):
        run_sweep(p, tmp_path / "o", workers=0, progress=False)
    f = tmp_path / "a-file"
    f.write_text("")
    assert main(["sweep", p, "--out", str(f)]) == 2  # W20: NotADirectoryError
    err = capsys.readouterr().err
    assert err.startswith("error: --out: ") and "is a file; expected a folder" in err and "Traceback" not in err
    assert main(["compare", str(tmp_path / "base.yaml"), "--out", str(f)]) == 2
    assert "is a file; expected a folder" in capsys.readouterr().err
    assert no_simulation == []


def test_infeasible_reasons_are_printed_whole(tmp_path, capsys):
    # W22: the reason was cut at 150 characters, before what was available and why
    p = write(tmp_path, {"axes": [{"field": "cluster.colocated.engine.max_total_tokens", "values": [10, 50_000]}]})
    assert main(["sweep", p, "--out", str(tmp_path / "o"), "--workers", "1"]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if "below min_kv_reserve_tokens" in ln)
    assert line.strip().startswith("1 x cluster.colocated[0].engine.max_total_tokens: ")
    assert line.rstrip().endswith("on purpose)")  # printed whole


# ------------------------------------------------------------------ cache

def test_a_torn_cache_file_is_a_warning_and_recomputed(tmp_path):
    p = write(tmp_path, {"axes": [RATE]})
    out = tmp_path / "o"
    first = run_sweep(p, out, workers=1, progress=False)
    files = sorted((out / "cache").glob("*.json"))
    files[0].write_text(files[0].read_text()[:40])  # a write cut short (F9)
    with pytest.warns(UserWarning, match=r"sweep cache .*\.json: not valid JSON .* recomputing that configuration"):
        again = run_sweep(p, out, workers=1, progress=False)
    assert again.attrs["computed"] == 1 and again.attrs["cached"] == 1 and len(again.attrs["cache_warnings"]) == 1
    pd.testing.assert_frame_equal(first.drop(columns="eval_wall_s"), again.drop(columns="eval_wall_s"))
    json.loads(files[0].read_text())  # rewritten whole


def test_a_cache_write_killed_midway_leaves_the_old_entry(tmp_path, monkeypatch):
    from pdsim.explore.runner import Cache

    cache = Cache(tmp_path)
    cache.put("k", {"status": "ok", "x": 1})
    real_dump = json.dump

    def dies(obj, f, **kw):
        f.write('{"format": 1, "ke')
        raise KeyboardInterrupt

    monkeypatch.setattr(json, "dump", dies)
    with pytest.raises(KeyboardInterrupt):
        cache.put("k", {"status": "ok", "x": 2})
    monkeypatch.setattr(json, "dump", real_dump)
    assert cache.get("k") == {"status": "ok", "x": 1} and cache.problems == []
    assert [p.name for p in (tmp_path / "cache").iterdir()] == ["k.json"]  # no temporary file left


def test_cache_key_follows_the_model_the_trace_bytes_and_the_version(tmp_path, monkeypatch):
    from pdsim.explore import fingerprint
    from pdsim.specs.catalog import models_dir

    (tmp_path / "m.yaml").write_text((models_dir() / "llama-3.1-8b.yaml").read_text())
    rows = "".join(json.dumps({"timestamp": 100 * k, "input_length": 64, "output_length": 4}) + "\n"
                   for k in range(30))
    (tmp_path / "t.jsonl").write_text(rows)
    base = scenario_dict("colocated", model="m.yaml")
    base["workload"] = {"kind": "trace", "trace": {"path": "t.jsonl"}}
    p = write(tmp_path, {"axes": [CHUNK]}, base=base)

    def keys():
        return [c.cache_key for c in plan_sweep(p).configs]

    k0 = keys()
    assert keys() == k0
    (tmp_path / "m.yaml").write_text((tmp_path / "m.yaml").read_text() + "\n# edited\n")
    k1 = keys()
    assert k1 != k0
    t = tmp_path / "t.jsonl"
    st = t.stat()
    t.write_text(rows.replace('"input_length": 64', '"input_length": 65', 1)[: len(rows)])
    import os

    os.utime(t, ns=(st.st_atime_ns, st.st_mtime_ns))  # same size and time: only the bytes tell
    k2 = keys()
    assert k2 != k1
    monkeypatch.setattr(pdsim, "__version__", "999.0")
    fingerprint.code_fingerprint.cache_clear()
    try:
        assert keys() != k2
    finally:
        fingerprint.code_fingerprint.cache_clear()


# ------------------------------------------------------------------ trust

PLUGIN = ("from pdsim.sim import Router\n"
          "class AlwaysLast(Router):\n"
          "    def pick_prefill(self, req, instances):\n"
          "        return instances[-1]\n")


@pytest.fixture
def plugin_module(tmp_path):
    name = f"sweep_plugin_{abs(hash(str(tmp_path))) % 10**8}"
    (tmp_path / f"{name}.py").write_text(PLUGIN)
    sys.path.insert(0, str(tmp_path))
    yield name
    sys.path.remove(str(tmp_path))
    sys.modules.pop(name, None)


def test_plugins_in_sweeps_and_compare_need_an_explicit_allow(tmp_path, capsys, plugin_module):
    base = scenario_dict("disagg")
    base["router"] = {"policy": f"{plugin_module}:AlwaysLast"}
    p = write(tmp_path, {"axes": [{"field": "cluster.decode.count", "values": [1, 2]}]}, base=base)
    with pytest.raises(SpecError, match=rf"module '{plugin_module}' is not an allowed plug-in source"):
        run_sweep(p, tmp_path / "o", workers=1, progress=False)
    assert plugin_module not in sys.modules  # refused before any import
    assert main(["sweep", p, "--out", str(tmp_path / "o"), "--workers", "1"]) == 2
    assert f"--allow-plugin {plugin_module}" in capsys.readouterr().err
    df = run_sweep(p, tmp_path / "o", workers=2, progress=False, trust=Trust(allow_plugins=(plugin_module,)))
    assert (df["status"] == "ok").all()
    assert main(["sweep", p, "--out", str(tmp_path / "o2"), "--workers", "1", "--allow-plugin", plugin_module]) == 0
    # the configs/*.yaml a trusted sweep wrote are data: loading one does not allow its plug-in
    cfg = next((tmp_path / "o" / "configs").glob("*.yaml"))
    sys.modules.pop(plugin_module, None)
    with pytest.raises(SpecError, match="not an allowed plug-in source"):
        pdsim.load_scenario(cfg)
    assert plugin_module not in sys.modules
    assert main(["compare", str(tmp_path / "base.yaml")]) == 2
    assert "not an allowed plug-in source" in capsys.readouterr().err
    assert main(["compare", str(tmp_path / "base.yaml"), "--allow-plugin", plugin_module]) == 0


# ------------------------------------------------------------------ what competes (issue 16)

def _table(rows) -> pd.DataFrame:
    df = pd.DataFrame(rows)
    df["status"] = "ok"
    df["layout"] = "C1g"
    df["gpus"] = 1
    df["config_id"] = [f"c{i}" for i in range(len(df))]
    return df


TARGET = {"target_goodput": 0.9, "limits": {"p90_ttft_ms": 1000.0}}


def test_frontiers_and_best_exclude_slo_violators_and_never_mix_workloads():
    rows = [  # rate 4: c0 violates the SLO but would dominate every other point
        dict(r=4, goodput_share=0.5, output_throughput_per_gpu=900, tokens_per_s_per_user=90, request_goodput=9,
             p90_ttft_ms=100),
        dict(r=4, goodput_share=0.95, output_throughput_per_gpu=500, tokens_per_s_per_user=40, request_goodput=3.8,
             p90_ttft_ms=200),
        dict(r=4, goodput_share=0.99, output_throughput_per_gpu=300, tokens_per_s_per_user=60, request_goodput=3.9,
             p90_ttft_ms=150),
        dict(r=4, goodput_share=0.99, output_throughput_per_gpu=200, tokens_per_s_per_user=30, request_goodput=3.9,
             p90_ttft_ms=5000),  # fails the percentile limit
        # rate 16: higher throughput everywhere; mixed with rate 4 it would hide all of rate 4's frontier
        dict(r=16, goodput_share=0.92, output_throughput_per_gpu=1500, tokens_per_s_per_user=70, request_goodput=14.7,
             p90_ttft_ms=800),
        dict(r=16, goodput_share=0.3, output_throughput_per_gpu=2500, tokens_per_s_per_user=95, request_goodput=4.8,
             p90_ttft_ms=900),
    ]
    df = mark(_table(rows).rename(columns={"r": "workload.rate"}), ["workload.rate"], TARGET)
    assert list(df["meets_slo"]) == [False, True, True, False, True, False]
    assert list(df["workload_group"]) == ["workload.rate=4"] * 4 + ["workload.rate=16"] * 2
    assert list(df.loc[df["pareto"], "config_id"]) == ["c1", "c2", "c4"]
    assert frontier_table(df)["config_id"].tolist() == ["c4", "c2", "c1"]  # by group, then x
    best = best_per_objective(df, [ObjectiveSpec("request_goodput"), ObjectiveSpec("p90_ttft_ms", "min")], [])
    assert {k: v["config_id"] for k, v in best.items()} == {
        "request_goodput [workload.rate=4]": "c2", "request_goodput [workload.rate=16]": "c4",
        "p90_ttft_ms [workload.rate=4]": "c2", "p90_ttft_ms [workload.rate=16]": "c4"}
    assert best["request_goodput [workload.rate=16]"]["workload"] == "workload.rate=16"
    # no target: every simulated row competes; no workload axis: one group, plain labels
    free = mark(_table(rows[:4]), [], {"target_goodput": None, "limits": {}})
    assert free["meets_slo"].all() and set(free["workload_group"]) == {""}
    assert list(best_per_objective(free, [ObjectiveSpec("request_goodput")], [])) == ["request_goodput"]
    fig = pareto_figure(df)
    names = [t.name for t in fig.data]
    assert "misses the SLO (not on a frontier)" in names
    assert "Pareto frontier: workload.rate=4" in names and "Pareto frontier: workload.rate=16" in names


def test_sweep_metrics_are_never_empty_and_named_as_bench_serving(tmp_path):
    # issue 16: p50_ttft_ms / p50_itl_ms were empty in results.csv (the summary says median_*)
    p = write(tmp_path, {"axes": [CHUNK], "search": {"target_goodput": None}})
    run_sweep(p, tmp_path / "o", workers=1, progress=False)
    for name in ("results.csv", "pareto.csv"):
        df = pd.read_csv(tmp_path / "o" / name)
        assert len(df) >= 1 and not [c for c in df if c.startswith("p50_")]
        empty = [m for m in METRICS if df[m].isna().any()]
        assert empty == [], (name, empty)
        assert (df["median_ttft_ms"] > 0).all() and (df["median_itl_ms"] > 0).all()


def test_sweep_outputs_name_the_target_and_groups(tmp_path, capsys):
    p = write(tmp_path, {"axes": [CHUNK, RATE], "search": {"target_goodput": 0.9, "limits": {"p90_ttft_ms": 400}}})
    assert main(["sweep", p, "--out", str(tmp_path / "o"), "--workers", "2"]) == 0
    text = capsys.readouterr().out
    assert "SLO target: goodput share >= 0.9, p90_ttft_ms <= 400" in text
    df = pd.read_csv(tmp_path / "o" / "results.csv")
    assert set(df["workload_group"]) == {"workload.rate=4", "workload.rate=16"}
    for g in ("workload.rate=4", "workload.rate=16"):
        n = int(df.loc[df["workload_group"] == g, "meets_slo"].sum())
        assert (f"meeting the SLO at {g}" in text) if n else (f"no configuration at {g} meets the SLO" in text)
    sim = df[df["status"] == "ok"]
    assert len(sim) == 4
    assert (sim["meets_slo"] == ((sim["goodput_share"] >= 0.9) & (sim["p90_ttft_ms"] <= 400))).all()
    assert not df.loc[~df["meets_slo"], "pareto"].any()
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["target"] == {"target_goodput": 0.9, "limits": {"p90_ttft_ms": 400.0}}
    html = (tmp_path / "o" / "report.html").read_text()
    assert "Target (the SLO a configuration must meet): goodput share &gt;= 0.9, p90_ttft_ms &lt;= 400" in html


# ------------------------------------------------------------------ heatmap axes

def test_default_heatmap_axes_are_never_linked():
    # the bundled 13-node sweep: a linked prefill shape (nodes/dp move together), x count, x decode
    shapes = [(2, 16), (2, 1), (3, 24), (4, 32), (4, 1)]
    rows = []
    for (nodes, dp) in shapes:
        for count in (1, 2):
            for dnodes in (4, 6, 9):
                rows.append({"cluster.prefill.nodes": nodes, "cluster.prefill.dp": dp, "cluster.prefill.count": count,
                             "axis.prefill_shape": f"{nodes}/{dp}", "cluster.decode.nodes": dnodes,
                             "prefill_layout": f"P{nodes}" if count == 1 else f"(P{count}x{nodes})",
                             "decode_layout": f"D{dnodes}", "status": "ok"})
    df = pd.DataFrame(rows)
    knobs = ["cluster.prefill.nodes", "cluster.prefill.dp", "axis.prefill_shape", "cluster.prefill.count",
             "cluster.decode.nodes"]
    assert heatmap_axes(df, knobs) == ("prefill_layout", "decode_layout")
    # without layouts: never nodes x dp of the linked axis (a diagonal), a crossed pair instead
    pair = heatmap_axes(df.drop(columns=["prefill_layout", "decode_layout"]), knobs)
    assert pair is not None and set(pair) != {"cluster.prefill.nodes", "cluster.prefill.dp"}
    sub = df.drop_duplicates(["cluster.prefill.nodes", "cluster.prefill.dp", "cluster.prefill.count",
                              "cluster.decode.nodes"])
    assert sub[list(pair)].drop_duplicates().shape[0] == sub[pair[0]].nunique() * sub[pair[1]].nunique()
    linked_only = pd.DataFrame({"a": [1, 2, 3], "b": [10, 20, 30], "status": "ok"})
    assert heatmap_axes(linked_only, ["a", "b"]) is None


def test_heatmap_axes_from_the_sweep_file_and_the_cli(tmp_path, capsys):
    axes = [CHUNK, {"field": "cluster.colocated.engine.max_running_requests", "values": [8, 64]}, RATE]
    p = write(tmp_path, {"axes": axes, "search": {"target_goodput": None},
                         "report": {"heatmap": {"x": "cluster.colocated.engine.max_running_requests",
                                                "y": "cluster.colocated.engine.chunked_prefill_size",
                                                "metric": "p90_ttft_ms"}}})
    run_sweep(p, tmp_path / "o", workers=2, progress=False)
    html = (tmp_path / "o" / "report.html").read_text()
    titles = re.findall(r"p90_ttft_ms \(max over other knobs among configurations meeting the SLO\) by "
                        r"(.+?)(?:\\u003c|<|\")", html)
    assert titles == ["colocated.max_running_requests x colocated.chunked_prefill_size"] * 2  # one per offered rate
    assert "workload.rate=4" in html and "workload.rate=16" in html
    assert main(["sweep", p, "--out", str(tmp_path / "o"), "--heatmap", "workload.rate",
                 "cluster.colocated.engine.chunked_prefill_size"]) == 0
    html = (tmp_path / "o" / "report.html").read_text()
    assert html.count("by rate x colocated.chunked_prefill_size") == 1  # rate on an axis: one heatmap
    assert main(["sweep", p, "--out", str(tmp_path / "o"), "--heatmap", "nope", "layout"]) == 2
    assert "--heatmap: 'nope' is not an axis of this sweep" in capsys.readouterr().err


# ------------------------------------------------------------------ compare

def test_compare_table_is_formatted_and_latency_axes_go_log(tmp_path):
    a, b = scenario_dict("colocated"), scenario_dict("disagg")
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(a))
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(b))
    df = pdsim.explore.compare([str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml")], tmp_path / "c",
                               overrides=["workload.num_requests=30"])
    assert not df[[m for m in METRICS if m in df]].isna().any().any()  # per-user throughput included
    page = (tmp_path / "c" / "compare.html").read_text()
    table = page[page.index("<table"):page.index("</table>")]
    assert "None" not in table and "nan" not in table.lower() and not re.search(r"\d\.\d{4,}", table)
    for header in ("TTFT p90 (ms)", "output tok/s per GPU", "goodput", "tok/s per user", "GPUs"):
        assert f"<th>{header}</th>" in table
    assert re.search(r"<td class=\"num\">\d+\.\d %</td>", table)  # goodput share as a percentage


def test_latency_axes_go_log_when_runs_differ_a_lot():
    df = pd.DataFrame({"scenario": ["fast", "overloaded"], "p90_ttft_ms": [120.0, 35_000.0],
                       "p90_itl_ms": [20.0, 25.0], "goodput_share": [1.0, 0.01]})
    fig = compare_figure(df)
    lay = fig.layout.to_plotly_json()
    types = [lay[a].get("type") for a in sorted(lay) if a.startswith("yaxis")]
    assert len(types) == 3 and types.count("log") == 1  # TTFT spans 290x; ITL and goodput stay linear
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    cdf = make_subplots(rows=1, cols=2)
    for med in (120.0, 35_000.0):
        cdf.add_trace(go.Scatter(x=np.linspace(0.5, 1.5, 20) * med, y=np.linspace(0, 1, 20)), row=1, col=1)
        cdf.add_trace(go.Scatter(x=np.linspace(0.5, 1.5, 20) * 20, y=np.linspace(0, 1, 20)), row=1, col=2)
    log_axes_where_runs_differ(cdf)
    assert cdf.layout.xaxis.type == "log" and cdf.layout.xaxis2.type != "log"


def test_html_table_formats_every_kind_of_cell():
    df = pd.DataFrame({"config_id": ["a", "b"], "goodput_share": [0.987, None], "p90_ttft_ms": [1234.5678, 0.01234],
                       "meets_slo": [True, False], "reason": [None, "too big"], "cluster.decode.count": [1, 2]})
    t = html_table(df, ["cluster.decode.count"], first=("config_id",))
    assert "<th>decode.count</th>" in t and "98.7 %" in t and "1,235" in t and "0.0123" in t
    assert "yes" in t and "no" in t and "–" in t and "None" not in t and "nan" not in t


# ------------------------------------------------------------------ the bundled max-rate example

def test_bundled_max_rate_example_runs_in_seconds(tmp_path, capsys):
    path = workloads_dir() / "sweeps" / "llama8b-a800-max-rate.yaml"
    t0 = time.perf_counter()
    assert main(["sweep", str(path), "--out", str(tmp_path / "o"), "--workers", "2"]) == 0
    wall = time.perf_counter() - t0
    assert wall < 30, wall
    df = pd.read_csv(tmp_path / "o" / "results.csv")
    assert len(df) == 3 and (df["status"] == "ok").all() and df["meets_slo"].all()
    assert ((df["max_rate"] > 0.5) & (df["max_rate"] < 64)).all() and df["search_note"].isna().all()
    assert (df["goodput_share"] >= 0.9).all() and (df["p90_ttft_ms"] <= 1000).all()
    # a tighter cap on running requests sustains less load but serves each user faster
    by = df.set_index("cluster.colocated.engine.max_running_requests")
    assert by.loc[8, "max_rate"] < by.loc[256, "max_rate"]
    assert by.loc[8, "tokens_per_s_per_user"] > by.loc[256, "tokens_per_s_per_user"]
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["best"]["max_rate"]["value"] == pytest.approx(df["max_rate"].max())
    assert "max rate" in capsys.readouterr().out


def test_cache_entries_that_cannot_be_read_or_written_are_never_fatal(tmp_path):
    p = write(tmp_path, {"axes": [RATE]})
    out = tmp_path / "o"
    first = run_sweep(p, out, workers=1, progress=False)
    victim = sorted((out / "cache").glob("*.json"))[0]
    victim.unlink()
    victim.mkdir()  # a folder where a cache file should be: unreadable and unwritable
    with pytest.warns(UserWarning) as record:
        again = run_sweep(p, out, workers=1, progress=False)
    texts = [str(w.message) for w in record]
    assert any("unreadable" in t for t in texts) and any("cannot write" in t and "not cached" in t for t in texts)
    assert again.attrs["computed"] == 1
    pd.testing.assert_frame_equal(first.drop(columns="eval_wall_s"), again.drop(columns="eval_wall_s"))
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "cache").write_text("")
    with pytest.raises(SpecError, match=r"--out: .*cache is a file"):
        run_sweep(p, tmp_path / "x", workers=1, progress=False)


def test_a_sandboxed_caller_reads_the_base_only_from_its_data_folders(tmp_path):
    p = write(tmp_path, {"axes": [RATE]})
    with pytest.raises(SpecError, match=r"sweep.yaml: base: cannot load the base scenario: .* is outside the data "
                                        r"folders"):
        plan_sweep(p, trust=Trust.sandboxed(tmp_path / "elsewhere"))
    assert len(plan_sweep(p, trust=Trust.sandboxed(tmp_path)).configs) == 2
