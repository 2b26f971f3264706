"""Workloads: generators by seed and distribution, trace readers, scaling, stats, errors."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdsim.specs import SpecError
from pdsim.specs._convert import build
from pdsim.specs.catalog import traces_dir
from pdsim.specs.workload import LengthDist, WorkloadSpec, parse_genai_scenario
from pdsim.workload import (RequestTable, materialize, read_trace, sample_lengths, scale_time, workload_stats,
                            write_mooncake)

SHARED = traces_dir()


def spec(**kw) -> WorkloadSpec:
    return build(WorkloadSpec, kw)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31), st.sampled_from(["synthetic", "multi_turn", "tool_agent", "fixed_batch"]))
def test_generators_are_deterministic_by_seed(seed, kind):
    s = spec(kind=kind, num_requests=200, rate=5.0, batch_size=8)
    a, b = materialize(s, seed), materialize(s, seed)
    assert np.array_equal(a.arrival_s, b.arrival_s) and np.array_equal(a.input_len, b.input_len)
    assert np.array_equal(a.output_len, b.output_len)
    assert (a.input_len >= 1).all() and (a.output_len >= 1).all() and (np.diff(a.arrival_s) >= 0).all()


@pytest.mark.parametrize("d, mean, std", [
    (LengthDist("uniform", min=100, max=300), 200.0, np.sqrt((201 ** 2 - 1) / 12)),
    (LengthDist("normal", mean=1000, std=100, min=1, max=10_000), 1000.0, 100.0),
    (LengthDist("lognormal", mean=500, std=400, min=1, max=10**7), 500.0, 400.0),
    (LengthDist("random_ratio", value=1000, range_ratio=0.5), 750.0, np.sqrt((501 ** 2 - 1) / 12)),
])
def test_length_distributions_match_their_moments(d, mean, std):
    x = sample_lengths(d, 200_000, np.random.default_rng(3))
    assert abs(x.mean() - mean) / mean < 0.02
    assert abs(x.std() - std) / std < 0.05


@pytest.mark.parametrize("rate, burst", [(4.0, 1.0), (10.0, 0.25), (2.0, 4.0)])
def test_gamma_arrivals_have_the_stated_rate_and_burstiness(rate, burst):
    t = materialize(spec(num_requests=100_000, rate=rate, burstiness=burst), 1)
    gaps = np.diff(t.arrival_s)
    assert abs(gaps.mean() * rate - 1) < 0.02
    assert abs((gaps.std() / gaps.mean()) ** 2 - 1 / burst) < 0.05 / burst + 0.02  # CV^2 = 1/k


def test_genai_bench_scenarios_parse():
    i, o = parse_genai_scenario("D(2000,200)")
    assert (i.value, o.value) == (2000, 200)
    i, o = parse_genai_scenario("N(480,240)/(300,150)")
    assert (i.mean, i.std, o.mean, o.std) == (480, 240, 300, 150)
    i, o = parse_genai_scenario("U(50,100)/(200,250)")
    assert (i.min, i.max, o.min, o.max) == (50, 100, 200, 250)
    with pytest.raises(SpecError, match="scenario"):
        spec(scenario="X(1,2)")


def test_multi_turn_reuses_a_growing_prefix():
    t = materialize(spec(kind="multi_turn"), 0)
    st_ = workload_stats(t)
    assert st_["prefix_reuse_ratio"] > 0.5
    for ids, n in zip(t.hash_ids, t.input_len):
        assert len(ids) == -(-int(n) // 512)


@settings(max_examples=25, deadline=None)
@given(st.floats(0.05, 20.0), st.integers(0, 1000))
def test_time_scaling_scales_duration_and_keeps_order(k, seed):
    t = materialize(spec(num_requests=300, rate=3.0), seed)
    s = scale_time(t, k)
    assert abs(s.duration_s - k * t.duration_s) <= 1e-9 * max(1.0, t.duration_s * k)
    assert np.array_equal(np.argsort(s.arrival_s, kind="stable"), np.argsort(t.arrival_s, kind="stable"))
    assert np.array_equal(s.input_len, t.input_len)


def test_trace_time_scale_via_spec():
    path = str(SHARED / "mooncake_fast25_synthetic_trace.jsonl")
    base = materialize(spec(kind="trace", trace={"path": path}))
    half = materialize(spec(kind="trace", trace={"path": path, "time_scale": 0.5}))
    assert abs(half.duration_s - 0.5 * base.duration_s) < 1e-6


@settings(max_examples=20, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 50_000), st.integers(1, 4000)), min_size=1, max_size=40))
def test_mooncake_round_trip(rows):
    rows = sorted(rows)
    t = RequestTable(np.array([r[0] / 1000 for r in rows]), np.array([r[1] for r in rows]),
                     np.array([r[2] for r in rows]),
                     hash_ids=[np.arange(-(-r[1] // 512), dtype=np.int64) for r in rows])
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "t.jsonl"
        write_mooncake(t, p)
        back = read_trace(p)
    assert np.allclose(back.arrival_s, t.arrival_s - t.arrival_s[0])
    assert np.array_equal(back.input_len, t.input_len) and np.array_equal(back.output_len, t.output_len)
    assert all(np.array_equal(a, b) for a, b in zip(back.hash_ids, t.hash_ids))


def test_bundled_traces_match_their_published_statistics():
    conv = read_trace(SHARED / "mooncake_fast25_conversation_trace.jsonl")
    assert len(conv) == 12031 and abs(conv.input_len.mean() - 12035.1) < 0.1
    assert abs(workload_stats(conv)["prefix_reuse_ratio"] - 0.3736) < 5e-4
    az = read_trace(SHARED / "azure_code_2023_sample2000.csv")
    assert len(az) == 2000 and az.arrival_s[0] == 0 and (np.diff(az.arrival_s) >= 0).all()


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize("line, expect", [
    ('{"timestamp": 5, "input_length": 10}', "line 2: output_length: missing"),
    ('{"timestamp": 5, "input_length": 10, "output_length": -3}', "line 2: output_length: expected a positive integer, got -3"),
    ('{"timestamp": 5, "input_length": "ten", "output_length": 3}', "line 2: input_length: expected a positive integer"),
    ('{"timestamp": 5, "input_length": 10, ', "line 2: invalid JSON"),
    ('{"timestamp": 0, "input_length": 10, "output_length": 3}\n{"timestamp": -1, "input_length": 1, "output_length": 1}',
     "line 3: timestamp: expected a non-negative number"),
])
def test_bad_mooncake_rows_name_file_and_line(tmp_path, line, expect):
    p = _write(tmp_path, "t.jsonl", '{"timestamp": 0, "input_length": 10, "output_length": 3}\n' + line + "\n")
    with pytest.raises(SpecError) as ei:
        read_trace(p)
    assert str(p) in str(ei.value) and expect in str(ei.value)


def test_non_monotone_timestamps_are_rejected(tmp_path):
    p = _write(tmp_path, "t.jsonl", "\n".join(json.dumps({"timestamp": t, "input_length": 5, "output_length": 5})
                                           for t in (0, 100, 50)) + "\n")
    with pytest.raises(SpecError, match="line 3: timestamp goes back in time"):
        read_trace(p)


def test_skip_bad_rows_skips_and_counts(tmp_path):
    p = _write(tmp_path, "a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
               "2023-11-16 18:17:03.9799600,10,2\n2023-11-16 18:17:04.0,x,2\n"
               "2023-11-16 18:17:05.0,5,0\n2023-11-16 18:17:06.5,7,1\n")
    with pytest.raises(SpecError, match="line 3: ContextTokens"):
        read_trace(p)
    t = read_trace(p, skip_bad_rows=True)
    assert len(t) == 2 and t.skipped_rows == 2 and abs(t.arrival_s[1] - 2.5203) < 1e-3


def test_missing_csv_column_is_named(tmp_path):
    p = _write(tmp_path, "b.csv", "Timestamp,Model,Request tokens,Total tokens\n1,ChatGPT,5,9\n")
    with pytest.raises(SpecError, match="missing column 'Response tokens'"):
        read_trace(p, "burstgpt")


def test_burstgpt_and_bench_formats(tmp_path):
    p = _write(tmp_path, "b.csv", "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
               "5,ChatGPT,472,18,490,Conversation log\n45,ChatGPT,1087,230,1317,Conversation log\n")
    t = read_trace(p)
    assert list(t.arrival_s) == [0.0, 40.0] and list(t.input_len) == [472, 1087]
    q = _write(tmp_path, "r.json", json.dumps({"input_lens": [10, 20], "output_lens": [3, 4], "duration": 1.0}))
    b = read_trace(q)
    assert list(b.output_len) == [3, 4]
