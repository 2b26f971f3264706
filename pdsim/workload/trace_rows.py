"""Row parsers of the trace formats: one line in, one checked row (or a BadRow) out.

A row is ``(t_s, input_len, output_len, hash_ids)``: arrival time in seconds on the trace's
own clock, prompt and output tokens (integers >= 1), and the prompt's block ids or None.
Parsers never raise for a bad row: they yield a ``BadRow`` naming the field and what was
expected, and the reader decides (stop with the line number, or skip and count).
"""
from __future__ import annotations

import csv
import datetime as _dt
import gzip
import json
import re
from pathlib import Path
from typing import IO, Callable, Iterator

from ..specs.errors import SpecError

Row = tuple[float, int, int, "list[int] | None"]


def open_text(path: Path) -> IO[str]:
    """A trace file as text lines (UTF-8), decompressing ``.gz``."""
    if path.suffix.lower() == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", newline="")
    return open(path, encoding="utf-8", newline="")


class BadRow(ValueError):
    """A malformed row; ``str()`` reads ``field: what was expected, got what``."""


def length(value, field: str, hint: str = "") -> int:
    """A token count: an integer >= 1 (``12``, ``12.0`` or ``"12"``). Zero is rejected too:
    a request without prompt tokens or without output is not servable (trace formats log
    failed requests that way), so it is an error, or skipped with skip_bad_rows."""
    if type(value) is int and value >= 1:  # the common case, without float conversion
        return value
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise BadRow(f"{field}: expected a positive integer, got {value!r}") from None
    if not v.is_integer() or v < 1:
        extra = f" ({hint})" if hint and v == 0 else ""
        raise BadRow(f"{field}: expected a positive integer, got {value!r}{extra}")
    return int(v)


def number(value, field: str) -> float:
    """A finite number >= 0 (a timestamp)."""
    if type(value) is int and value >= 0:
        return float(value)
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise BadRow(f"{field}: expected a number, got {value!r}") from None
    if not (0 <= v < float("inf")):  # also rejects NaN
        raise BadRow(f"{field}: expected a non-negative number, got {value!r}")
    return v


# ---- Mooncake JSONL -----------------------------------------------------------------------
MOONCAKE_KEYS = ("timestamp", "input_length", "output_length")


def mooncake_rows(f: IO[str], block_size: int = 512) -> Iterator[tuple[int, Row | BadRow]]:
    """Mooncake trace lines: ``timestamp`` (ms from the trace start), ``input_length``,
    ``output_length`` (tokens) and optional ``hash_ids``: one integer per ``block_size``-token
    prompt block, so exactly ceil(input_length / block_size) of them."""
    for lineno, line in enumerate(f, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            yield lineno, BadRow(f"invalid JSON ({err.msg} at column {err.colno})")
            continue
        try:
            if not isinstance(row, dict):
                raise BadRow(f"expected a JSON object, got {type(row).__name__}")
            for key in MOONCAKE_KEYS:
                if key not in row:
                    raise BadRow(f"{key}: missing")
            t = number(row["timestamp"], "timestamp") / 1000.0
            n_in = length(row["input_length"], "input_length")
            n_out = length(row["output_length"], "output_length", "a zero-length answer cannot be served")
            h = row.get("hash_ids")
            if h is not None:
                if not isinstance(h, list) or not all(type(x) is int for x in h):
                    raise BadRow(f"hash_ids: expected a list of integers, got {_short(h)}")
                want = -(-n_in // block_size)
                if len(h) != want:
                    raise BadRow(f"hash_ids: expected ceil(input_length / {block_size}) = {want} block ids, "
                                 f"got {len(h)} (set the trace's block_size if its blocks are not "
                                 f"{block_size} tokens)")
            yield lineno, (t, n_in, n_out, h)
        except BadRow as err:
            yield lineno, err


def _short(v) -> str:
    s = repr(v)
    return s if len(s) <= 60 else s[:57] + "..."


# ---- CSV (Azure, BurstGPT) ----------------------------------------------------------------
_TS = re.compile(r"^\s*(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(\.\d+)?\s*(Z|[+-]\d{2}:?\d{2})?\s*$")


class WallClock:
    """Parses ``YYYY-mm-dd HH:MM:SS[.fffffff][Z|+hh:mm]`` (Azure traces: seven fractional
    digits, 100 ns, no zone) to seconds since the first time it parsed (UTC), or a plain
    number as seconds. Whole seconds are exact integers, so 100 ns survive in the float result
    (seconds since 1970 as a float would keep only ~0.2 us). Faster than strptime, which also
    rejects the seventh fractional digit."""

    def __init__(self, field: str):
        self.field = field
        self._days: dict[str, int] = {}
        self._base: int | None = None
        self._numbers = False  # the file's times are plain seconds

    def __call__(self, text: str) -> float:
        m = _TS.match(text)
        if m is None:
            try:
                v = number(text, self.field)
            except BadRow:
                raise BadRow(f"{self.field}: expected a time 'YYYY-mm-dd HH:MM:SS.fffffff' or seconds, "
                             f"got {text!r}") from None
            if self._base is not None:  # the file started with dates: a bare number is not one
                raise BadRow(f"{self.field}: expected a time 'YYYY-mm-dd HH:MM:SS.fffffff' like the rows "
                             f"before, got {text!r}")
            self._numbers = True
            return v
        if self._numbers:
            raise BadRow(f"{self.field}: expected seconds like the rows before, got {text!r}")
        y, mo, d, hh, mi, ss, frac, zone = m.groups()
        key = y + mo + d
        days = self._days.get(key)
        if days is None:
            try:
                days = _dt.date(int(y), int(mo), int(d)).toordinal()
            except ValueError as err:
                raise BadRow(f"{self.field}: {err} in {text!r}") from None
            self._days[key] = days
        h, mn, s = int(hh), int(mi), int(ss)
        if h > 23 or mn > 59 or s > 60:
            raise BadRow(f"{self.field}: no such time of day in {text!r}")
        whole = days * 86400 + h * 3600 + mn * 60 + s
        if zone and zone != "Z":
            sign = -1 if zone[0] == "+" else 1  # 12:00+02:00 is 10:00 UTC
            whole += sign * (int(zone[1:3]) * 3600 + int(zone[-2:]) * 60)
        if self._base is None:
            self._base = whole  # exact integer seconds: the float result stays small and precise
        return float(whole - self._base) + (float(frac) if frac else 0.0)


AZURE = {"t": "TIMESTAMP", "in": "ContextTokens", "out": "GeneratedTokens"}
BURSTGPT = {"t": "Timestamp", "in": "Request tokens", "out": "Response tokens"}


def csv_rows(f: IO[str], columns: dict[str, str], time_fn: Callable[[str], float], source: str,
             zero_hint: str = "") -> Iterator[tuple[int, Row | BadRow]]:
    """Rows of a CSV with a header naming ``columns`` (other columns are ignored). A missing
    column is not a row error: it raises SpecError at once."""
    reader = csv.reader(f)
    header = next(reader, None)
    if header is None:
        return
    header = [h.strip().lstrip("\ufeff") for h in header]
    idx = {}
    for key, name in columns.items():
        if name not in header:
            raise SpecError(f"line 1: header: missing column {name!r} (have {', '.join(header)})", source=source)
        idx[key] = header.index(name)
    need = max(idx.values()) + 1
    ti, ii, oi = idx["t"], idx["in"], idx["out"]
    for rec in reader:
        lineno = reader.line_num
        if not rec or (len(rec) == 1 and not rec[0].strip()):
            continue
        try:
            if len(rec) < need:
                raise BadRow(f"expected {len(header)} columns, got {len(rec)}")
            yield lineno, (time_fn(rec[ti]), length(rec[ii].strip(), columns["in"]),
                           length(rec[oi].strip(), columns["out"], zero_hint), None)
        except BadRow as err:
            yield lineno, err


def azure_rows(f: IO[str], source: str) -> Iterator[tuple[int, Row | BadRow]]:
    """Azure LLM inference trace (2023/2024): ``TIMESTAMP``, ``ContextTokens``, ``GeneratedTokens``."""
    return csv_rows(f, AZURE, WallClock("TIMESTAMP"), source)


def burstgpt_rows(f: IO[str], source: str) -> Iterator[tuple[int, Row | BadRow]]:
    """BurstGPT: ``Timestamp`` (s from the start of its first day), ``Request tokens``,
    ``Response tokens``; failed requests have 0 response tokens and are bad rows."""
    return csv_rows(f, BURSTGPT, lambda s: number(s.strip(), "Timestamp"), source,
                    "BurstGPT logs failed requests with 0 response tokens; skip them with skip_bad_rows")
