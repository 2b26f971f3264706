"""Streaming trace readers and a writer (round trips), with errors naming file and line.

Formats:
- ``mooncake``: JSONL, ``timestamp`` (ms), ``input_length``, ``output_length``, ``hash_ids``
  (one id per 512-token block, prefix-chained). Mooncake FAST'25 traces.
- ``azure``: CSV ``TIMESTAMP`` (``YYYY-mm-dd HH:MM:SS.fffffff``), ``ContextTokens``,
  ``GeneratedTokens``. Azure LLM inference traces 2023.
- ``burstgpt``: CSV ``Timestamp`` (s), ``Model``, ``Request tokens``, ``Response tokens``,
  ``Total tokens``, ``Log Type``. BurstGPT.
- ``bench``: a SGLang ``bench_serving`` / ``vllm bench serve`` result JSON carrying per-request
  ``input_lens`` and ``output_lens`` (no arrival times: all at t=0; shape with a rate).

Rows are read one at a time (files are never loaded whole). Lengths must be integers >= 1
and timestamps non-decreasing; a bad row raises SpecError("line N: field: ..."), or with
``skip_bad_rows`` is skipped and counted in ``RequestTable.skipped_rows``.
"""
from __future__ import annotations

import csv
import json
from array import array
from datetime import datetime
from pathlib import Path
from typing import Iterator

import numpy as np

from ..specs.errors import SpecError
from .table import RequestTable

Row = tuple[float, int, int, list | None]


class BadRow(ValueError):
    pass


def _length(value, field: str) -> int:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise BadRow(f"{field}: expected a positive integer, got {value!r}") from None
    if not v.is_integer() or v < 1:
        raise BadRow(f"{field}: expected a positive integer, got {value!r}")
    return int(v)


def _number(value, field: str) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise BadRow(f"{field}: expected a number, got {value!r}") from None
    if v != v or v < 0:
        raise BadRow(f"{field}: expected a non-negative number, got {value!r}")
    return v


def _iter_mooncake(f) -> Iterator[tuple[int, Row]]:
    for lineno, line in enumerate(f, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            yield lineno, BadRow(f"invalid JSON ({err.msg})")
            continue
        try:
            if not isinstance(row, dict):
                raise BadRow("expected a JSON object")
            for key in ("timestamp", "input_length", "output_length"):
                if key not in row:
                    raise BadRow(f"{key}: missing")
            h = row.get("hash_ids")
            if h is not None and (not isinstance(h, list) or not all(isinstance(x, int) for x in h)):
                raise BadRow(f"hash_ids: expected a list of integers, got {h!r}")
            yield lineno, (_number(row["timestamp"], "timestamp") / 1000.0, _length(row["input_length"], "input_length"),
                           _length(row["output_length"], "output_length"), h)
        except BadRow as err:
            yield lineno, err


def _parse_azure_time(s: str) -> float:
    # seven fractional digits (100 ns) do not parse with %f: cut to microseconds
    head, _, frac = s.strip().partition(".")
    dt = datetime.strptime(head, "%Y-%m-%d %H:%M:%S")
    return dt.timestamp() + (float("0." + frac) if frac else 0.0)


def _iter_csv(f, columns: dict[str, str], time_fn) -> Iterator[tuple[int, Row]]:
    reader = csv.reader(f)
    try:
        header = next(reader)
    except StopIteration:
        return
    idx = {}
    for key, name in columns.items():
        if name not in header:
            yield 1, BadRow(f"header: missing column {name!r} (have {', '.join(header)})")
            return
        idx[key] = header.index(name)
    for lineno, rec in enumerate(reader, 2):
        if not rec:
            continue
        try:
            if len(rec) < len(header):
                raise BadRow(f"expected {len(header)} columns, got {len(rec)}")
            t = time_fn(rec[idx["t"]])
            yield lineno, (t, _length(rec[idx["in"]], columns["in"]), _length(rec[idx["out"]], columns["out"]), None)
        except BadRow as err:
            yield lineno, err
        except ValueError as err:
            yield lineno, BadRow(f"{columns['t']}: {err}")


def _azure_time(s: str) -> float:
    try:
        return _parse_azure_time(s)
    except ValueError:
        raise BadRow(f"TIMESTAMP: expected 'YYYY-mm-dd HH:MM:SS.fffffff', got {s!r}") from None


def detect_format(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return "mooncake"
    if suffix == ".json":
        return "bench"
    if suffix == ".csv":
        with open(path, newline="") as f:
            header = f.readline()
        if "ContextTokens" in header:
            return "azure"
        if "Request tokens" in header:
            return "burstgpt"
    raise SpecError("cannot tell the trace format from the name or header; set format: mooncake, azure, "
                    "burstgpt or bench", source=str(path))


def read_trace(path: str | Path, fmt: str = "auto", time_scale: float = 1.0, limit: int | None = None,
               start_s: float = 0.0, skip_bad_rows: bool = False) -> RequestTable:
    """Read a trace into a RequestTable: arrivals relative to the first kept request, scaled
    by ``time_scale`` (inter-arrival times multiplied; smaller = heavier load)."""
    p = Path(path)
    if not p.is_file():
        raise SpecError("trace file not found", source=str(path))
    if fmt in ("auto", "jsonl"):
        fmt = detect_format(p) if fmt == "auto" else "mooncake"
    if fmt == "bench":
        return _read_bench(p, limit)
    ts, inp, out = array("d"), array("q"), array("q")
    hashes: list = []
    any_hash = False
    skipped = 0
    last_t = -1.0
    t_first = None
    with open(p, newline="") as f:
        if fmt == "mooncake":
            rows = _iter_mooncake(f)
        elif fmt == "azure":
            rows = _iter_csv(f, {"t": "TIMESTAMP", "in": "ContextTokens", "out": "GeneratedTokens"}, _azure_time)
        elif fmt == "burstgpt":
            rows = _iter_csv(f, {"t": "Timestamp", "in": "Request tokens", "out": "Response tokens"},
                             lambda s: _number(s, "Timestamp"))
        else:
            raise SpecError(f"unknown trace format {fmt!r}", source=str(path), field="format")
        for lineno, row in rows:
            if isinstance(row, BadRow):
                if skip_bad_rows and not str(row).startswith("header"):
                    skipped += 1
                    continue
                raise SpecError(f"line {lineno}: {row}", source=str(p))
            t, i, o, h = row
            if t < last_t:
                if skip_bad_rows:
                    skipped += 1
                    continue
                raise SpecError(f"line {lineno}: timestamp goes back in time ({t:.3f} s after {last_t:.3f} s); "
                                "traces must be sorted by arrival", source=str(p))
            last_t = t
            if t_first is None:
                t_first = t
            if t - t_first < start_s:
                continue  # before the window the scenario replays
            ts.append(t)
            inp.append(i)
            out.append(o)
            hashes.append(h)
            any_hash |= h is not None
            if limit is not None and len(ts) >= limit:
                break
    if not len(ts):
        raise SpecError("no requests in trace" + (f" after start_s={start_s}" if start_s else "")
                        + (f" ({skipped} bad rows skipped)" if skipped else ""), source=str(p))
    a = np.frombuffer(ts, dtype=np.float64)
    hids = None
    if any_hash:
        hids = [np.asarray(h if h is not None else [], dtype=np.int64) for h in hashes]
    table = RequestTable((a - a[0]) * time_scale, np.frombuffer(inp, dtype=np.int64).copy(),
                         np.frombuffer(out, dtype=np.int64).copy(), hash_ids=hids, source=str(p))
    table.skipped_rows = skipped
    return table


def _read_bench(p: Path, limit: int | None) -> RequestTable:
    try:
        data = json.loads(p.read_text())
    except json.JSONDecodeError as err:
        raise SpecError(f"line {err.lineno}: invalid JSON ({err.msg})", source=str(p)) from None
    if not isinstance(data, dict) or "input_lens" not in data or "output_lens" not in data:
        raise SpecError("expected a benchmark result JSON with per-request input_lens and output_lens",
                        source=str(p))
    ins, outs = data["input_lens"], data["output_lens"]
    if len(ins) != len(outs):
        raise SpecError(f"input_lens has {len(ins)} entries but output_lens {len(outs)}", source=str(p))
    try:
        i = [_length(v, f"input_lens[{k}]") for k, v in enumerate(ins)]
        o = [_length(v, f"output_lens[{k}]") for k, v in enumerate(outs)]
    except BadRow as err:
        raise SpecError(str(err), source=str(p)) from None
    if limit:
        i, o = i[:limit], o[:limit]
    return RequestTable(np.zeros(len(i)), i, o, source=str(p))


def write_mooncake(table: RequestTable, path: str | Path) -> None:
    """Write a RequestTable as a Mooncake-format JSONL trace (timestamps in ms)."""
    with open(path, "w") as f:
        for k in range(len(table)):
            row = {"timestamp": int(round(table.arrival_s[k] * 1000)), "input_length": int(table.input_len[k]),
                   "output_length": int(table.output_len[k])}
            if table.hash_ids is not None:
                row["hash_ids"] = [int(x) for x in table.hash_ids[k]]
            f.write(json.dumps(row) + "\n")
