"""Workload statistics, the stats figure and ``pdsim workload stats`` (stats_command)."""
from __future__ import annotations

import json

import numpy as np
import plotly.graph_objects as go
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdsim.report.workload_figures import workload_figure, write_workload_html
from pdsim.specs import SpecError
from pdsim.specs.catalog import traces_dir, workloads_dir
from pdsim.workload import RequestTable, prefix_hit_tokens, prefix_reuse_ratio, read_trace, workload_stats
from pdsim.cli.workload_stats import stats_command

TRACES = traces_dir()
PUBLISHED = json.loads("""{"conv": {"rows": 12031, "mean_rps": 3.4014711341450763, "blocks": 288500, "unique": 182790,
  "reuse": 0.3736}, "synth": {"rows": 3993, "mean_rps": 3.9069494386145154, "blocks": 121877, "unique": 43924,
  "reuse": 0.6512}}""")  # from the shared trace_stats.json


@pytest.mark.parametrize("name, key", [("mooncake_fast25_conversation_trace.jsonl", "conv"),
                                       ("mooncake_fast25_synthetic_trace.jsonl", "synth")])
def test_mooncake_reuse_matches_the_published_infinite_cache_ratio(name, key):
    s = workload_stats(read_trace(TRACES / name))
    want = PUBLISHED[key]
    assert s["requests"] == want["rows"] and s["mean_rate"] == pytest.approx(want["mean_rps"])
    assert s["total_blocks"] == want["blocks"] and s["unique_blocks"] == want["unique"]
    assert abs(s["prefix_reuse_ratio"] - want["reuse"]) < 5e-5
    assert sum(s["rate_series"]) * s["rate_bin_s"] == pytest.approx(want["rows"])
    assert sum(s["input_hist"]["counts"]) == want["rows"] == sum(s["output_hist"]["counts"])
    json.dumps(s)  # plain data


def _naive_hits(table: RequestTable) -> list[int]:
    seen: set[int] = set()
    out = []
    for ids, n in zip(table.hash_ids, table.input_len.tolist()):
        m = 0
        for h in ids.tolist():
            if h not in seen:
                break
            m += 1
        out.append(min(m * table.block_size, n))
        seen.update(ids.tolist())
    return out


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(1, 3000)), min_size=1, max_size=40),
       st.sampled_from([64, 512]))
def test_vectorised_prefix_hits_equal_a_plain_loop(reqs, block):
    # requests drawn from 7 "documents": a prefix-chained id chain per document, cut to length
    ids = [np.arange(doc * 1000, doc * 1000 + -(-n // block), dtype=np.int64) for doc, n in reqs]
    t = RequestTable(np.arange(len(reqs), dtype=float), [n for _, n in reqs], [1] * len(reqs), hash_ids=ids,
                     block_size=block)
    assert prefix_hit_tokens(t).tolist() == _naive_hits(t)
    total = sum(n for _, n in reqs)
    assert prefix_reuse_ratio(t) == pytest.approx(sum(_naive_hits(t)) / total)


def test_stats_of_a_closed_loop_table():
    t = RequestTable(np.zeros(5), [10, 20, 30, 40, 50], [1, 2, 3, 4, 5], max_concurrency=2)
    s = workload_stats(t)
    assert s["duration_s"] == 0 and s["mean_rate"] == float("inf") and s["prefix_reuse_ratio"] == 0.0
    assert s["input_len"]["p50"] == 30 and s["max_concurrency"] == 2 and s["rate_series"] == [5.0]


def test_figure_has_four_panels_and_writes_offline_html(tmp_path):
    t = read_trace(TRACES / "mooncake_fast25_synthetic_trace.jsonl")
    fig = workload_figure(t)
    titles = [a.text for a in fig.layout.annotations]
    assert any("arrivals" in x for x in titles) and any("prefix reuse" in x for x in titles)
    assert any("input length" in x for x in titles) and any("output length" in x for x in titles)
    p = write_workload_html(tmp_path / "sub" / "w.html", stats=workload_stats(t))
    html = p.read_text()
    assert p.stat().st_size > 1_000_000 and 'src="https://cdn.plot.ly' not in html  # plotly.js embedded
    # pre-binned: the figure adds a few kB to plotly.js, not one value per request
    empty = tmp_path / "empty.html"
    go.Figure().write_html(str(empty), include_plotlyjs=True)
    assert p.stat().st_size - empty.stat().st_size < 100_000
    no_hash = workload_figure(read_trace(TRACES / "azure_code_2023_sample2000.csv"))
    assert any("no hash_ids" in a.text for a in no_hash.layout.annotations)


def test_stats_command_on_a_trace(tmp_path, capsys):
    html = tmp_path / "w.html"
    assert stats_command(str(TRACES / "mooncake_fast25_conversation_trace.jsonl"), str(html), False, "auto") == 0
    out = capsys.readouterr().out
    assert "12,031" in out and "37.36% of prompt tokens" in out and "input (ISL)" in out and html.is_file()


def test_stats_command_on_specs_scenarios_and_bundled_names(tmp_path, capsys):
    assert stats_command("sharegpt-poisson", None, False, "auto") == 0  # bundled workload spec key
    assert "synthetic sharegpt" in capsys.readouterr().out
    assert stats_command(str(workloads_dir() / "specs" / "multi-turn-chat.yaml"), None, False, "auto") == 0
    assert "prefix reuse" in capsys.readouterr().out
    assert stats_command(str(workloads_dir() / "scenarios" / "dsv3-h800-p4d6.yaml"), None, False, "auto") == 0
    assert "mooncake_fast25_conversation_trace.jsonl" in capsys.readouterr().out
    assert stats_command("azure_conv_2023_sample2000.csv", None, False, "auto") == 0  # bundled trace name
    assert "2,000" in capsys.readouterr().out


def test_stats_command_errors_and_skipped_rows(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 5, "output_length": 2}\n{"timestamp": 1, "input_length": 5}\n')
    with pytest.raises(SpecError, match="bad.jsonl: line 2: output_length: missing"):
        stats_command(str(bad), None, False, "auto")
    assert stats_command(str(bad), None, True, "auto") == 0
    assert "1 bad rows skipped" in capsys.readouterr().out
    spec = tmp_path / "w.yaml"
    spec.write_text("kind: synthetic\nrate: -1\n")
    with pytest.raises(SpecError, match="w.yaml: rate: must be > 0"):
        stats_command(str(spec), None, False, "auto")
    scen = tmp_path / "s.yaml"
    scen.write_text("seed: 3\nworkload: {kind: trace, trace: {path: bad.jsonl}}\n")
    with pytest.raises(SpecError, match="line 2"):
        stats_command(str(scen), None, False, "auto")
    assert stats_command(str(scen), None, True, "auto") == 0  # --skip-bad-rows reaches a spec's trace
    typo = tmp_path / "t.yaml"
    typo.write_text("workload: {kind: synthetic, rat: 2}\n")
    with pytest.raises(SpecError, match="t.yaml: workload.rat: unknown field \\(did you mean 'rate'\\?\\)"):
        stats_command(str(typo), None, False, "auto")
    with pytest.raises(SpecError, match="no such file"):
        stats_command(str(tmp_path / "missing.jsonl"), None, False, "auto")
