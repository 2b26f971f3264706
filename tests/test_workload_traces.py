"""Trace readers: round trips, the bundled files, and the promised errors on bad rows."""
from __future__ import annotations

import gzip
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
from pdsim.specs.workload import WorkloadSpec
from pdsim.workload import RequestTable, detect_format, materialize, read_trace, write_trace

TRACES = traces_dir()
AZ_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
BG_HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"


def spec(**kw) -> WorkloadSpec:
    return build(WorkloadSpec, kw)


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def moon(t, i, o, **kw) -> str:
    return json.dumps({"timestamp": t, "input_length": i, "output_length": o, **kw}) + "\n"


rows = st.lists(st.tuples(st.floats(0, 5e6, allow_nan=False), st.integers(1, 200_000), st.integers(1, 8000)),
                min_size=1, max_size=30)


@settings(max_examples=15, deadline=None)
@given(rows, st.sampled_from(["mooncake", "azure", "burstgpt", "bench"]), st.booleans())
def test_every_format_round_trips(data, fmt, gz):
    data = sorted(data)
    t0 = data[0][0]
    inp = np.array([r[1] for r in data])
    table = RequestTable(np.array([r[0] - t0 for r in data]), inp, np.array([r[2] for r in data]),
                         hash_ids=[np.arange(k * 1000, k * 1000 + -(-n // 512)) for k, n in enumerate(inp.tolist())]
                         if fmt == "mooncake" else None)
    suffix = {"mooncake": ".jsonl", "azure": ".csv", "burstgpt": ".csv", "bench": ".json"}[fmt]
    with tempfile.TemporaryDirectory() as d:
        p = write_trace(table, Path(d) / f"t{suffix}{'.gz' if gz else ''}", fmt)
        assert detect_format(p) == fmt
        back = read_trace(p)
    assert np.allclose(back.arrival_s, table.arrival_s, rtol=0, atol=2e-6)
    assert np.array_equal(back.input_len, table.input_len) and np.array_equal(back.output_len, table.output_len)
    if fmt == "mooncake":
        assert all(np.array_equal(a, b) for a, b in zip(back.hash_ids, table.hash_ids))


@pytest.mark.parametrize("name, rows_, first_in", [
    ("mooncake_fast25_conversation_trace.jsonl", 12031, None),
    ("mooncake_fast25_synthetic_trace.jsonl", 3993, 40160),
    ("azure_code_2023_sample2000.csv", 2000, 4808),
    ("azure_conv_2023_sample2000.csv", 2000, None),
])
def test_bundled_traces_read_whole(name, rows_, first_in):
    t = read_trace(TRACES / name)
    assert len(t) == rows_ and t.arrival_s[0] == 0 and (np.diff(t.arrival_s) >= 0).all()
    assert first_in is None or t.input_len[0] == first_in
    assert t.skipped_rows == 0 and (t.input_len >= 1).all() and (t.output_len >= 1).all()


def test_mooncake_conversation_matches_published_statistics():
    t = read_trace(TRACES / "mooncake_fast25_conversation_trace.jsonl")
    assert t.duration_s == pytest.approx(3536.999) and t.input_len.mean() == pytest.approx(12035.1, abs=0.05)
    assert t.output_len.mean() == pytest.approx(342.6, abs=0.05) and t.input_len.max() == 126195


def test_azure_time_has_100ns_resolution():
    t = read_trace(TRACES / "azure_code_2023_sample2000.csv")
    # rows 1 and 2: 18:17:03.9799600 and 18:17:04.0319600
    assert t.arrival_s[1] == pytest.approx(0.052, abs=1e-9)


BAD = [
    # (file name, content, expected message after "<file>: ")
    ("trace.jsonl", moon(0, 10, 3) * 6 + moon(5, 10, -3), "line 7: output_length: expected a positive integer, got -3"),
    ("trace.jsonl", moon(0, 10, 3) + '{"timestamp": 5, "input_length": 10}\n', "line 2: output_length: missing"),
    ("trace.jsonl", moon(0, 10, 3) + moon(5, "ten", 3), "line 2: input_length: expected a positive integer, got 'ten'"),
    ("trace.jsonl", moon(0, 10, 3) + moon(5, 10, 0), "line 2: output_length: expected a positive integer, got 0"),
    ("trace.jsonl", moon(0, 10, 3) + moon(5, 10.5, 3), "line 2: input_length: expected a positive integer, got 10.5"),
    ("trace.jsonl", moon(0, 10, 3) + moon("soon", 10, 3), "line 2: timestamp: expected a number, got 'soon'"),
    ("trace.jsonl", moon(0, 10, 3) + moon(-1, 10, 3), "line 2: timestamp: expected a non-negative number"),
    ("trace.jsonl", moon(0, 10, 3) + '{"timestamp": 5, "input_length": 10, \n', "line 2: invalid JSON"),
    ("trace.jsonl", moon(0, 10, 3) + "[1, 2]\n", "line 2: expected a JSON object, got a list"),
    ("trace.jsonl", moon(0, 10, 3) + moon(9, 1000, 3, hash_ids=[1]),
     "line 2: hash_ids: expected ceil(input_length / 512) = 2"),
    ("trace.jsonl", moon(0, 10, 3) + moon(9, 10, 3, hash_ids=["a"]), "line 2: hash_ids: expected a list of integers"),
    ("trace.jsonl", moon(0, 10, 3) + moon(9, 10, 3, hash_ids=[2**70]), "line 2: hash_ids: ids must fit"),
    ("trace.jsonl", moon(0, 10, 3) + moon(100, 10, 3) + moon(50, 1, 1), "line 3: timestamp goes back in time"),
    ("az.csv", AZ_HEADER + "2023-11-16 18:17:03.97,10,2\n2023-11-16 18:17:04.0,x,2\n",
     "line 3: ContextTokens: expected a positive integer, got 'x'"),
    ("az.csv", AZ_HEADER + "2023-11-16 18:17:03.97,10,2\n2023-13-16 18:17:04.0,5,2\n",
     "line 3: TIMESTAMP: month must be in 1..12"),
    ("az.csv", AZ_HEADER + "2023-11-16 18:17:03.97,10,2\nyesterday,5,2\n", "line 3: TIMESTAMP: expected a time"),
    ("az.csv", AZ_HEADER + "2023-11-16 18:17:03.97,10,2\n2023-11-16 18:17:04.0,5\n",
     "line 3: expected 3 columns, got 2"),
    ("az.csv", AZ_HEADER + "2023-11-16 18:17:03.97,10,2\n2023-11-16 18:17:01.0,5,2\n", "line 3: timestamp goes back"),
    ("az.csv", "TIMESTAMP,Context,GeneratedTokens\n2023-11-16 18:17:03.97,10,2\n",
     "line 1: header: missing column 'ContextTokens'"),
    ("b.csv", BG_HEADER + "5,ChatGPT,472,18,490,Conversation log\n45,ChatGPT,1087,0,1087,Conversation log\n",
     "line 3: Response tokens: expected a positive integer, got '0' (BurstGPT logs failed requests"),
    ("b.csv", "Timestamp,Model,Request tokens,Total tokens\n1,ChatGPT,5,9\n", "missing column 'Response tokens'"),
]


@pytest.mark.parametrize("name, text, expect", BAD)
def test_bad_rows_name_the_file_and_line(tmp_path, name, text, expect):
    p = write(tmp_path, name, text)
    with pytest.raises(SpecError) as ei:
        read_trace(p, "burstgpt" if name == "b.csv" else "auto")
    assert str(ei.value).startswith(f"{p}: ") and expect in str(ei.value), str(ei.value)
    assert ei.value.source == str(p)


ROW_ERRORS = [b for b in BAD if "header" not in b[2] and "missing column" not in b[2]]


@pytest.mark.parametrize("name, text, expect", ROW_ERRORS)
def test_skip_bad_rows_skips_and_counts(tmp_path, name, text, expect):
    p = write(tmp_path, name, text)
    t = read_trace(p, "burstgpt" if name == "b.csv" else "auto", skip_bad_rows=True)
    good = len([ln for ln in text.splitlines() if ln.strip()]) - (1 if name.endswith(".csv") else 0)
    assert t.skipped_rows == 1 and len(t) == good - 1


def test_header_errors_are_not_skippable(tmp_path):
    p = write(tmp_path, "az.csv", "TIMESTAMP,GeneratedTokens\n2023-11-16 18:17:03.97,2\n")
    with pytest.raises(SpecError, match="missing column 'ContextTokens'"):
        read_trace(p, skip_bad_rows=True)


def test_a_trace_of_only_bad_rows_is_an_error(tmp_path):
    p = write(tmp_path, "t.jsonl", moon(0, 0, 3) + moon(1, 5, 0))
    with pytest.raises(SpecError, match=r"no requests \(2 bad rows skipped\)"):
        read_trace(p, skip_bad_rows=True)


def test_unsorted_trace_can_be_sorted(tmp_path):
    p = write(tmp_path, "t.jsonl", moon(0, 10, 1) + moon(3000, 20, 2) + moon(1000, 30, 3))
    t = read_trace(p, sort=True)
    assert list(t.arrival_s) == [0.0, 1.0, 3.0] and list(t.input_len) == [10, 30, 20]


def test_window_and_limit(tmp_path):
    p = write(tmp_path, "t.jsonl", "".join(moon(k * 1000, 10 + k, 1) for k in range(10)))
    t = read_trace(p, start_s=2.0, duration_s=5.0)
    assert list(t.input_len) == [12, 13, 14, 15, 16] and t.arrival_s[0] == 0.0
    assert list(read_trace(p, start_s=2.0, limit=2).input_len) == [12, 13]
    assert list(read_trace(p, sort=True, start_s=2.0, duration_s=5.0, limit=3).input_len) == [12, 13, 14]
    with pytest.raises(SpecError, match="no requests in the window start_s=20"):
        read_trace(p, start_s=20.0)


def test_reading_streams_and_stops_at_the_limit(tmp_path):
    # the line after the limit is broken: a reader that loaded the whole file would fail on it
    p = write(tmp_path, "t.jsonl", moon(0, 10, 1) + moon(1, 10, 1) + "this is not json\n")
    assert len(read_trace(p, limit=2)) == 2


def test_block_size_of_hash_ids(tmp_path):
    p = write(tmp_path, "t.jsonl", moon(0, 100, 1, hash_ids=[1, 2, 3, 4]))
    with pytest.raises(SpecError, match="expected ceil\\(input_length / 512\\) = 1"):
        read_trace(p)
    t = read_trace(p, block_size=32)
    assert t.block_size == 32 and list(t.hash_ids[0]) == [1, 2, 3, 4]


def test_file_level_errors(tmp_path):
    with pytest.raises(SpecError, match="trace file not found"):
        read_trace(tmp_path / "nope.jsonl")
    with pytest.raises(SpecError, match="cannot tell the trace format"):
        read_trace(write(tmp_path, "t.txt", "a b c\n"))
    with pytest.raises(SpecError, match="unknown trace format 'parquet'"):
        read_trace(write(tmp_path, "t.jsonl", moon(0, 1, 1)), "parquet")
    with pytest.raises(SpecError, match=r"line 1: not UTF-8 text \(byte 0xff at column 1\)"):
        b = tmp_path / "bin.jsonl"
        b.write_bytes(b"\xff\xfe\x00garbage\n")
        read_trace(b)
    with pytest.raises(SpecError, match="no requests"):
        read_trace(write(tmp_path, "empty.jsonl", "\n"))


def test_azure_timestamps_with_zones_and_seconds(tmp_path):
    p = write(tmp_path, "z.csv", AZ_HEADER + "2024-05-10 00:00:00.5+00:00,5,1\n2024-05-10 02:00:01+02:00,5,1\n")
    assert list(read_trace(p, "azure").arrival_s) == [0.0, 0.5]
    q = write(tmp_path, "s.csv", AZ_HEADER + "10.0,5,1\n12.5,5,1\n")
    assert list(read_trace(q, "azure").arrival_s) == [0.0, 2.5]


def test_burstgpt_reads_its_published_first_rows(tmp_path):
    p = write(tmp_path, "BurstGPT_1.csv", BG_HEADER + "5,ChatGPT,472,18,490,Conversation log\n"
              "45,ChatGPT,1087,230,1317,Conversation log\n")
    t = read_trace(p)
    assert list(t.arrival_s) == [0.0, 40.0] and list(t.input_len) == [472, 1087] and list(t.output_len) == [18, 230]


def _bench(**kw) -> dict:
    doc = {"duration": 10.0, "completed": 3, "input_lens": [100, 200, 300], "output_lens": [10, 20, 30],
           "errors": ["", "", ""], "request_rate": "inf", "max_concurrency": 8}
    doc.update(kw)
    return doc


def test_bench_results_sglang_jsonl_and_vllm_json(tmp_path):
    one = write(tmp_path, "vllm.json", json.dumps(_bench(start_times=[5.5, 5.0, 6.0])))
    t = read_trace(one)
    assert list(t.input_len) == [200, 100, 300] and list(t.arrival_s) == [0.0, 0.5, 1.0]  # sorted by send time
    assert t.max_concurrency == 8
    runs = json.dumps({"duration": 1.0, "request_throughput": 3.0}) + "\n" + json.dumps(_bench()) + "\n" + \
        json.dumps(_bench(input_lens=[7, 8], output_lens=[1, 2], errors=["", ""])) + "\n"
    sg = write(tmp_path, "sglang.jsonl", runs)
    assert detect_format(sg) == "bench"
    assert list(read_trace(sg).input_len) == [7, 8]  # the last run appended
    assert list(read_trace(sg, record=2).input_len) == [100, 200, 300]
    with pytest.raises(SpecError, match="no run with per-request lengths on line 1"):
        read_trace(sg, record=1)


def test_bench_errors(tmp_path):
    failed = write(tmp_path, "r.json", json.dumps(_bench(output_lens=[10, 0, 30], errors=["", "timeout", ""])))
    with pytest.raises(SpecError, match="output_lens\\[1\\]: request failed in the benchmark \\('timeout'\\)"):
        read_trace(failed)
    t = read_trace(failed, skip_bad_rows=True)
    assert t.skipped_rows == 1 and list(t.input_len) == [100, 300]
    with pytest.raises(SpecError, match="no per-request input_lens/output_lens .* --output-details"):
        read_trace(write(tmp_path, "s.json", json.dumps({"duration": 1.0})))
    with pytest.raises(SpecError, match="input_lens\\[3\\]: missing"):
        read_trace(write(tmp_path, "m.json", json.dumps(_bench(output_lens=[1, 2, 3, 4]))))
    with pytest.raises(SpecError, match="line 1: invalid JSON"):
        read_trace(write(tmp_path, "broken.json", '{"input_lens": [1, 2'))


def test_bench_replays_the_recorded_request_rate(tmp_path):
    p = write(tmp_path, "r.json", json.dumps(_bench(input_lens=[100] * 2000, output_lens=[10] * 2000,
                                                    errors=[""] * 2000, request_rate=20.0, max_concurrency=None)))
    t = materialize(spec(kind="trace", trace={"path": str(p)}), seed=1)
    assert abs(len(t) / t.duration_s - 20.0) < 2.0 and t.max_concurrency is None
    t2 = materialize(spec(kind="trace", rate=5.0, trace={"path": str(p)}), seed=1)
    assert abs(len(t2) / t2.duration_s - 5.0) < 0.5


def test_trace_spec_scaling_and_rate_reshaping():
    path = str(TRACES / "mooncake_fast25_synthetic_trace.jsonl")
    base = materialize(spec(kind="trace", trace={"path": path}))
    half = materialize(spec(kind="trace", trace={"path": path, "time_scale": 0.5}))
    assert half.duration_s == pytest.approx(0.5 * base.duration_s) and np.array_equal(half.input_len, base.input_len)
    fast = materialize(spec(kind="trace", rate=50.0, trace={"path": path, "limit": 1000}), seed=2)
    assert np.array_equal(fast.input_len, base.input_len[:1000]) and abs(1000 / fast.duration_s - 50) < 5
    assert all(np.array_equal(a, b) for a, b in zip(fast.hash_ids, base.hash_ids[:1000]))


def test_trace_spec_relative_path_and_missing_file(tmp_path):
    with pytest.raises(SpecError, match="trace file not found: nope.jsonl") as ei:
        materialize(spec(kind="trace", trace={"path": "nope.jsonl"}), base_dir=tmp_path)
    assert ei.value.field == "workload.trace.path"
    write(tmp_path, "here.jsonl", moon(0, 5, 5))
    assert len(materialize(spec(kind="trace", trace={"path": "here.jsonl"}), base_dir=tmp_path)) == 1


def test_gzip_traces_stream(tmp_path):
    p = tmp_path / "t.jsonl.gz"
    with gzip.open(p, "wt") as f:
        f.write(moon(0, 5, 5) + moon(2000, 6, 6))
    t = read_trace(p)
    assert list(t.arrival_s) == [0.0, 2.0] and detect_format(p) == "mooncake"
