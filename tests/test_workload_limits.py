"""Hardened trace readers and workload specs: compressed and non-UTF-8 files, overflowing and
non-finite numbers, size limits, and error messages that quote only a short excerpt."""
from __future__ import annotations

import bz2
import gzip
import json
import lzma
import zipfile

import numpy as np
import pytest

from pdsim.specs import SpecError
from pdsim.specs._convert import build
from pdsim.specs.workload import MAX_SPAN_S, MAX_TOKENS, WorkloadSpec
from pdsim.workload import detect_format, materialize, read_trace


def moon(t, i, o, **kw) -> str:
    return json.dumps({"timestamp": t, "input_length": i, "output_length": o, **kw}) + "\n"


AZ = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.97,10,3\n2023-11-16 18:17:04.5,20,4\n"
ROWS = moon(0, 10, 3) + moon(1500, 20, 4)


def spec(**kw) -> WorkloadSpec:
    return build(WorkloadSpec, kw)


def _zstd(data: bytes) -> bytes:
    import pyarrow as pa

    buf = pa.BufferOutputStream()
    with pa.CompressedOutputStream(buf, "zstd") as s:
        s.write(data)
    return buf.getvalue().to_pybytes()


@pytest.mark.parametrize("compress", [gzip.compress, bz2.compress, lzma.compress, _zstd])
@pytest.mark.parametrize("name, text, fmt", [("t.jsonl", ROWS, "mooncake"), ("t.csv", AZ, "azure")])
def test_compressed_files_are_read_by_magic_bytes_whatever_their_name(tmp_path, compress, name, text, fmt):
    # T10, T11: a gzip file named .jsonl / .csv (no .gz) was read as text and failed on byte 0x8b
    p = tmp_path / name
    p.write_bytes(compress(text.encode()))
    assert detect_format(p) == fmt
    t = read_trace(p)
    assert list(t.input_len) == [10, 20] and list(t.output_len) == [3, 4]
    assert t.arrival_s[1] == pytest.approx(1.5 if fmt == "mooncake" else 0.53)


def test_a_plain_file_named_gz_is_read_as_text(tmp_path):
    p = tmp_path / "t.jsonl.gz"
    p.write_text(ROWS)
    assert len(read_trace(p)) == 2


def test_archives_and_truncated_compression_are_clean_errors(tmp_path):
    z = tmp_path / "t.jsonl"
    with zipfile.ZipFile(z, "w") as f:
        f.writestr("t.jsonl", ROWS)
    with pytest.raises(SpecError, match="a zip archive; extract the trace file from it first"):
        read_trace(z)
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(gzip.compress((ROWS * 200).encode())[:60])
    with pytest.raises(SpecError, match=r"cut.jsonl: cannot read: Compressed file ended"):
        read_trace(cut, "mooncake")


def test_non_utf8_names_the_line_and_byte_and_can_be_skipped(tmp_path):
    # T39: a Latin-1 byte on line 2 was "UnicodeDecodeError at position 1" with no file or line
    p = tmp_path / "t.jsonl"
    p.write_bytes(ROWS.encode() + b'{"timestamp": 2000, "input_length": 5, "output_length": 1, "u": "\xe9"}\n')
    with pytest.raises(SpecError) as ei:
        read_trace(p)
    assert str(ei.value) == f"{p}: line 3: not UTF-8 text (byte 0xe9 at column 66); save the file as UTF-8"
    assert len(read_trace(p, skip_bad_rows=True)) == 2
    c = tmp_path / "t.csv"
    c.write_bytes(AZ.encode() + b"2023-11-16 18:17:05.0,3\xff,1\n")
    with pytest.raises(SpecError, match=r"line 4: ContextTokens: not UTF-8 text \(byte 0xff at column 2\)"):
        read_trace(c)
    binary = tmp_path / "b.csv"
    binary.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(SpecError, match=r"b.csv: line 1: not a text file"):
        read_trace(binary)


@pytest.mark.parametrize("bom_text", [ROWS, AZ])
def test_a_utf8_byte_order_mark_is_accepted(tmp_path, bom_text):
    # T24: "missing column 'TIMESTAMP' (have \ufeffTIMESTAMP, ...)"
    p = tmp_path / ("t.jsonl" if bom_text is ROWS else "t.csv")
    p.write_bytes(b"\xef\xbb\xbf" + bom_text.encode())
    assert list(read_trace(p).input_len) == [10, 20]


@pytest.mark.parametrize("row, expect", [
    ('{"timestamp": 1, "input_length": 1e300, "output_length": 3}', "input_length: expected at most 100,000,000"),
    (moon(1, 2**63, 3).strip(), "input_length: expected at most 100,000,000 tokens, got 9223372036854775808"),
    (moon(1, 10, 10**30).strip(), "output_length: expected at most"),
    ('{"timestamp": Infinity, "input_length": 10, "output_length": 3}', "timestamp: expected a finite number"),
    ('{"timestamp": NaN, "input_length": 10, "output_length": 3}', "timestamp: expected a finite number"),
    ('{"timestamp": 1e400, "input_length": 10, "output_length": 3}', "timestamp: expected a finite number"),
    (moon(10**400, 10, 3).strip(), "timestamp: expected a finite number"),
    (moon(1, True, 3).strip(), "input_length: expected a positive integer, got True"),
    (moon(True, 10, 3).strip(), "timestamp: expected a number, got True"),
    (moon(1, 600, 3, hash_ids=[True, False]).strip(), "hash_ids: expected a list of integers, got [true, false]"),
    (moon(1, 10, 3, hash_ids=[2**64]).strip(), "hash_ids: ids must fit in signed 64-bit integers"),
    ("[" * 100_000 + "]" * 100_000, "JSON nested too deeply"),
])
def test_overflowing_non_finite_and_mistyped_values_are_row_errors(tmp_path, row, expect):
    # T20, T21, T22, T38: OverflowError, ValueError or silent acceptance before
    p = tmp_path / "t.jsonl"
    p.write_text(moon(0, 10, 3) + row + "\n" + moon(3000, 1, 1))
    with pytest.raises(SpecError) as ei:
        read_trace(p)
    assert str(ei.value).startswith(f"{p}: line 2: ") and expect in str(ei.value), str(ei.value)
    t = read_trace(p, skip_bad_rows=True)
    assert t.skipped_rows == 1 and len(t) == 2


def test_timestamps_beyond_the_span_limit(tmp_path):
    # T45: one row at 1e300 ms made arange fail ("Maximum allowed size exceeded") or hang the world
    p = tmp_path / "t.jsonl"
    p.write_text(moon(0, 10, 3) + moon(1e300, 10, 3))
    with pytest.raises(SpecError, match=r"line 2: timestamp: .* years after the first request; a trace spans at "
                                        r"most 10 years"):
        read_trace(p)
    with pytest.raises(SpecError, match=r"line 2: timestamp: .* years after the first request"):
        read_trace(p, sort=True)  # found after sorting, still named by its line
    assert len(read_trace(p, skip_bad_rows=True)) == 1
    assert len(read_trace(p, sort=True, skip_bad_rows=True)) == 1
    ok = tmp_path / "ok.jsonl"
    ok.write_text(moon(0, 10, 3) + moon(MAX_SPAN_S * 1000 * 0.99, 10, 3))
    assert read_trace(ok).duration_s == pytest.approx(MAX_SPAN_S * 0.99)
    # a time scale that stretches a valid trace past the bound names the field
    with pytest.raises(SpecError, match=r"ok.jsonl: time_scale: arrivals over 19.8 years \(time_scale 2 on 9.9 years"):
        read_trace(ok, time_scale=2.0)
    with pytest.raises(SpecError, match=r"ok.jsonl: workload.trace.time_scale: arrivals over .* years \(time_scale "
                                        r"1e\+06 on 9.9 years of trace\)"):
        materialize(spec(kind="trace", trace={"path": str(ok), "time_scale": 1e6}))


def test_a_huge_line_is_skipped_without_being_held_in_memory(tmp_path, monkeypatch):
    import pdsim.workload.textio as textio

    monkeypatch.setattr(textio, "MAX_LINE_CHARS", 1000)
    monkeypatch.setattr(textio.LineReader.__init__, "__defaults__", (1000,))
    p = tmp_path / "t.jsonl"
    p.write_text(moon(0, 10, 3) + '{"x": "' + "a" * 5000 + '"}\n' + moon(10, 5, 1))
    with pytest.raises(SpecError, match="line 2: line longer than"):
        read_trace(p)
    assert list(read_trace(p, skip_bad_rows=True).input_len) == [10, 5]
    c = tmp_path / "t.csv"
    c.write_text(AZ + '"' + "9" * 200_000 + '",1,1\n2023-11-16 18:17:06.0,7,1\n')
    with pytest.raises(SpecError, match=r"line 4: line longer than"):
        read_trace(c)


def test_a_csv_field_over_the_csv_module_limit_is_a_row_error(tmp_path):
    c = tmp_path / "t.csv"
    c.write_text(AZ + '"' + "9" * 200_000 + '",1,1\n2023-11-16 18:17:06.0,7,1\n')
    with pytest.raises(SpecError, match=r"t.csv: line 4: malformed CSV \(field larger than field limit"):
        read_trace(c)
    assert list(read_trace(c, skip_bad_rows=True).input_len) == [10, 20, 7]


def test_a_header_error_quotes_only_a_short_excerpt(tmp_path):
    # SEC-3: `format: azure` on any file printed its whole first line
    secret = "root:x:0:0:root:/root:/bin/bash:" + "S3CRET" * 50
    p = tmp_path / "passwd"
    p.write_text(secret + "\nsecond line\n")
    with pytest.raises(SpecError) as ei:
        read_trace(p, "azure")
    msg = str(ei.value)
    assert "missing columns 'TIMESTAMP', 'ContextTokens', 'GeneratedTokens'" in msg
    assert len(msg) < len(str(p)) + 140 and "S3CRETS3CRET" not in msg and "second line" not in msg


@pytest.mark.parametrize("doc, expect", [
    ({"input_lens": 5, "output_lens": [1]}, "input_lens: expected a list of per-request token counts, got 5"),
    ({"input_lens": [], "output_lens": []}, "input_lens, output_lens: empty lists: the run recorded no requests"),
    ({"input_lens": [1, 2], "output_lens": [1, 2], "errors": 5}, "errors: expected a list with one entry"),
    ({"input_lens": [1, 2], "output_lens": [1, 2], "start_times": "x"}, "start_times: expected a list"),
    ({"input_lens": [1, True], "output_lens": [1, 2]}, "input_lens[1]: expected a positive integer, got True"),
    ({"input_lens": [1, 1e300], "output_lens": [1, 2]}, "input_lens[1]: expected at most"),
    ({"input_lens": [1, [2]], "output_lens": [1, 2]}, "input_lens[1]: expected a positive integer, got a list"),
    ({"input_lens": [1, 2], "output_lens": [1, 2], "start_times": [0, float("inf")]},
     "start_times[1]: expected a finite number"),
])
def test_bench_result_shapes(tmp_path, doc, expect):
    # T14 (TypeError: object of type 'int' has no len()), T29 (IndexError)
    p = tmp_path / "r.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(SpecError) as ei:
        read_trace(p)
    assert str(ei.value).startswith(f"{p}: ") and expect in str(ei.value), str(ei.value)


def test_bench_deep_nesting_and_size_limit(tmp_path, monkeypatch):
    p = tmp_path / "r.json"
    p.write_text('{"input_lens": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(SpecError, match="invalid JSON \\(nested too deeply\\)"):
        read_trace(p)
    import pdsim.workload.bench as bench

    monkeypatch.setattr(bench, "MAX_BENCH_CHARS", 2**20)
    p.write_text(json.dumps({"input_lens": [5] * 300_000, "output_lens": [5] * 300_000}))
    with pytest.raises(SpecError, match="a benchmark result of more than 1 Mi characters"):
        read_trace(p)


def test_the_request_limit_stops_a_trace_and_says_how_to_raise_it(tmp_path, monkeypatch):
    p = tmp_path / "t.jsonl"
    p.write_text("".join(moon(k, 5, 1) for k in range(50)))
    monkeypatch.setenv("PDSIM_MAX_REQUESTS", "20")
    with pytest.raises(SpecError, match=r"more than 20 requests \(the limit per workload\); replay a part with "
                                        r"limit: or duration_s:, or set the environment variable PDSIM_MAX_REQUESTS"):
        read_trace(p)
    assert len(read_trace(p, limit=20)) == 20
    monkeypatch.setenv("PDSIM_MAX_REQUESTS", "50")
    assert len(read_trace(p)) == 50
    monkeypatch.setenv("PDSIM_MAX_REQUESTS", "lots")
    with pytest.raises(SpecError, match="environment: PDSIM_MAX_REQUESTS: expected a positive integer"):
        read_trace(p)


@pytest.mark.parametrize("kw, expect", [
    # S77, S76: immediate MemoryError (7.45 GiB) before
    (dict(kind="synthetic", num_requests=10**9), "num_requests: 1,000,000,000 requests is more than the limit of "
                                                 "2,000,000 requests per workload"),
    (dict(kind="multi_turn", conversation={"sessions": 10**9}), "conversation.sessions: 1,000,000,000 sessions"),
    (dict(kind="multi_turn", conversation={"sessions": 10**6, "turns": {"dist": "fixed", "value": 50}}),
     "conversation.turns: 50,000,000 requests (1,000,000 sessions x 50 turns on average)"),
    (dict(kind="fixed_batch", batch_size=10**9), "batch_size: 1,000,000,000 requests"),
    (dict(kind="synthetic", num_requests=30, rate=1e-9), "rate: arrivals over 920 years (30 requests at 1e-09 "
                                                         "req/s); pdsim simulates at most 10 years"),
    (dict(kind="multi_turn", conversation={"sessions": 10, "session_rate": 1e-12}), "conversation.session_rate"),
    (dict(kind="synthetic", input={"dist": "fixed", "value": 10**18}), "input.value: at most 100,000,000"),
    (dict(kind="synthetic", scenario="D(99999999999999999999999,5)"), "scenario: lengths are at most 100,000,000"),
    (dict(kind="synthetic", shared_prefix_tokens=10**15), "shared_prefix_tokens: at most 100,000,000 tokens"),
    (dict(kind="synthetic", shared_prefix_tokens=1024, prefix_groups=10**12), "prefix_groups: 1,000,000,000,000"),
    (dict(kind="synthetic", num_requests=2_000_000, shared_prefix_tokens=10**7),
     "shared_prefix_tokens: the prompts would carry about"),
    (dict(kind="multi_turn", conversation={"sessions": 1000, "turns": {"dist": "fixed", "value": 2000}}),
     "conversation: the prompts would carry about"),
    (dict(kind="synthetic", input={"dist": "normal", "mean": float("inf"), "std": 1}),  # S42
     "input.mean: expected a finite number, got inf"),
    (dict(kind="trace", trace={"path": "t.jsonl", "time_scale": float("nan")}), "trace.time_scale: expected a finite"),
    (dict(kind="trace", trace={"path": "t.jsonl", "limit": 0}), "trace.limit: must be >= 1"),  # S82
    (dict(kind="trace", trace={"path": "t.jsonl", "start_s": -5}), "trace.start_s: must be >= 0"),  # S83
])
def test_workload_specs_refuse_what_the_machine_cannot_hold(kw, expect):
    with pytest.raises(SpecError) as ei:
        spec(**kw)
    assert expect in str(ei.value), str(ei.value)


def test_specs_at_the_limits_are_accepted_and_the_limit_can_be_raised(monkeypatch):
    assert spec(kind="synthetic", num_requests=2_000_000).num_requests == 2_000_000
    monkeypatch.setenv("PDSIM_MAX_REQUESTS", "3000000")
    assert spec(kind="synthetic", num_requests=3_000_000).num_requests == 3_000_000
    assert spec(kind="synthetic", input={"dist": "fixed", "value": MAX_TOKENS}).input.value == MAX_TOKENS


def test_materialized_arrivals_are_checked_whatever_made_them():
    # a session's turns are spaced by their expected decode time: only the draw shows how far
    slow = spec(kind="multi_turn", conversation={"sessions": 3, "decode_s_per_token": 1e7})
    with pytest.raises(SpecError, match=r"workload: arrivals over .* years \(the sessions\); pdsim simulates at most"):
        materialize(slow, seed=1)
    ok = materialize(spec(kind="multi_turn", conversation={"sessions": 3}), seed=1)
    assert np.isfinite(ok.arrival_s).all() and len(ok) >= 3
