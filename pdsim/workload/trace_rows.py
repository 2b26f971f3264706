"""Row parsers of the trace formats: one line in, one checked row (or a BadRow) out.

A row is ``(t_s, input_len, output_len, hash_ids[, priority])``: arrival time in seconds on
the trace's own clock, prompt and output tokens (integers >= 1), the prompt's block ids or
None, and (Mooncake rows that carry one) the request's priority class.
Parsers never raise for a bad row: they yield a ``BadRow`` naming the field and what was
expected, and the reader decides (stop with the line number, or skip and count).
"""
from __future__ import annotations

import csv
import datetime as _dt
import json
import re
from typing import IO, Callable, Iterator

from ..specs.errors import SpecError
from ..specs.workload import MAX_TOKENS
from ..specs.yamlio import excerpt
from .textio import LineReader, bad_utf8, open_text  # noqa: F401 - open_text: the readers' opener

Row = tuple  # (t_s, input_len, output_len, hash_ids | None[, priority])


class BadRow(ValueError):
    """A malformed row; ``str()`` reads ``field: what was expected, got what``."""


def length(value, field: str, hint: str = "") -> int:
    """A token count: an integer in [1, MAX_TOKENS] (``12``, ``12.0`` or ``"12"``). Zero is
    rejected too: a request without prompt tokens or without output is not servable (trace
    formats log failed requests that way), so it is an error, or skipped with skip_bad_rows."""
    if type(value) is int and 1 <= value <= MAX_TOKENS:  # the common case, without float conversion
        return value
    if isinstance(value, bool):
        raise BadRow(f"{field}: expected a positive integer, got {excerpt(value)}")
    try:
        v = float(value)
    except (TypeError, ValueError, OverflowError):
        raise BadRow(f"{field}: expected a positive integer, got {excerpt(value)}") from None
    if not v.is_integer() or v < 1:  # NaN and inf are not integers
        extra = f" ({hint})" if hint and v == 0 else ""
        raise BadRow(f"{field}: expected a positive integer, got {excerpt(value)}{extra}")
    if v > MAX_TOKENS:
        raise BadRow(f"{field}: expected at most {MAX_TOKENS:,} tokens, got {excerpt(value)}")
    return int(v)


def number(value, field: str) -> float:
    """A finite number >= 0 (a timestamp)."""
    if type(value) is int and 0 <= value < 2**1023:
        return float(value)
    if isinstance(value, bool):
        raise BadRow(f"{field}: expected a number, got {excerpt(value)}")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise BadRow(f"{field}: expected a number, got {excerpt(value)}") from None
    except OverflowError:  # an integer beyond float range
        raise BadRow(f"{field}: expected a finite number, got {excerpt(value)}") from None
    if v != v or v in (float("inf"), float("-inf")):
        raise BadRow(f"{field}: expected a finite number, got {excerpt(value)}")
    if v < 0:
        raise BadRow(f"{field}: expected a non-negative number, got {excerpt(value)}")
    return v


# ---- Mooncake JSONL -----------------------------------------------------------------------
MOONCAKE_KEYS = ("timestamp", "input_length", "output_length")


def mooncake_rows(f: IO[str], block_size: int = 512) -> Iterator[tuple[int, Row | BadRow]]:
    """Mooncake trace lines: ``timestamp`` (ms from the trace start), ``input_length``,
    ``output_length`` (tokens), optional ``hash_ids``: one integer per ``block_size``-token
    prompt block, so exactly ceil(input_length / block_size) of them, and optional ``priority``
    (an integer class, pdsim's extension for priority scheduling)."""
    lines = LineReader(f)
    for line in lines:
        lineno = lines.lineno
        if not line.strip():
            if lines.long and lineno in lines.long:
                yield lineno, BadRow(lines.too_long(lineno))
            continue
        problem = bad_utf8(line)
        if problem:
            yield lineno, BadRow(problem)
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            yield lineno, BadRow(f"invalid JSON ({err.msg} at column {err.colno})")
            continue
        except RecursionError:
            yield lineno, BadRow("invalid row: JSON nested too deeply")
            continue
        try:
            if not isinstance(row, dict):
                raise BadRow(f"expected a JSON object, got {_json_type(row)}")
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
            prio = row.get("priority")
            if prio is None:
                yield lineno, (t, n_in, n_out, h)
            else:
                yield lineno, (t, n_in, n_out, h, priority(prio))
        except BadRow as err:
            yield lineno, err


def priority(value) -> int:
    """A priority class: an integer that fits in 32 bits (``12`` or ``12.0``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            (isinstance(value, float) and not value.is_integer()):
        raise BadRow(f"priority: expected an integer, got {excerpt(value)}")
    if not -2**31 <= value < 2**31:
        raise BadRow(f"priority: expected an integer in [-2**31, 2**31), got {excerpt(value)}")
    return int(value)


def _json_type(v) -> str:
    return {list: "a list", str: "a string", int: "a number", float: "a number", bool: "true/false",
            type(None): "null"}.get(type(v), type(v).__name__)


def _short(v) -> str:
    """A JSON value as the file wrote it, cut short: a list shows its first items (the wrong
    one is usually among them)."""
    def js(x) -> str:
        text = json.dumps(x) if isinstance(x, (bool, int, float, str, type(None))) else _json_type(x)
        return text if len(text) <= 20 else text[:19] + "…"

    if isinstance(v, list):
        return "[" + ", ".join(js(x) for x in v[:4]) + (", ...]" if len(v) > 4 else "]")
    return js(v)


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
                             f"got {excerpt(text)}") from None
            if self._base is not None:  # the file started with dates: a bare number is not one
                raise BadRow(f"{self.field}: expected a time 'YYYY-mm-dd HH:MM:SS.fffffff' like the rows "
                             f"before, got {excerpt(text)}")
            self._numbers = True
            return v
        if self._numbers:
            raise BadRow(f"{self.field}: expected seconds like the rows before, got {excerpt(text)}")
        y, mo, d, hh, mi, ss, frac, zone = m.groups()
        key = y + mo + d
        days = self._days.get(key)
        if days is None:
            try:
                days = _dt.date(int(y), int(mo), int(d)).toordinal()
            except ValueError as err:
                raise BadRow(f"{self.field}: {err} in {excerpt(text)}") from None
            self._days[key] = days
        h, mn, s = int(hh), int(mi), int(ss)
        if h > 23 or mn > 59 or s > 60:
            raise BadRow(f"{self.field}: no such time of day in {excerpt(text)}")
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
    column is not a row error: it raises SpecError at once, naming the missing columns and a
    short excerpt of the header it found (never the file's content)."""
    lines = LineReader(f)
    reader = csv.reader(lines)
    try:
        header = next(reader, None)
    except csv.Error as err:
        raise SpecError(f"line 1: header: malformed CSV ({err})", source=source) from None
    if header is None:
        return
    if lines.long:
        raise SpecError(f"line 1: header: {lines.too_long(1)}", source=source)
    header = [h.strip().lstrip("\ufeff") for h in header]
    missing = [name for name in columns.values() if name not in header]
    if missing:
        problem = bad_utf8(",".join(header))
        shown = ", ".join(excerpt(h, 20) for h in header[:3]) + (", ..." if len(header) > 3 else "")
        found = "not UTF-8 text" if problem else f"{len(header)} column{'s' if len(header) != 1 else ''}: {shown}"
        raise SpecError(f"line 1: header: missing column{'s' if len(missing) > 1 else ''} "
                        f"{', '.join(repr(m) for m in missing)} (found {found})", source=source)
    idx = {key: header.index(name) for key, name in columns.items()}
    need = max(idx.values()) + 1
    ti, ii, oi = idx["t"], idx["in"], idx["out"]
    last = 1
    while True:
        try:
            rec = next(reader)
        except StopIteration:
            return
        except csv.Error as err:
            last = reader.line_num
            yield reader.line_num, BadRow(f"malformed CSV ({err})")
            continue
        lineno, first = reader.line_num, last + 1
        last = lineno
        if lines.long and any(n in lines.long for n in range(first, lineno + 1)):
            yield lineno, BadRow(lines.too_long(max(n for n in range(first, lineno + 1) if n in lines.long)))
            continue
        if not rec or (len(rec) == 1 and not rec[0].strip()):
            continue
        try:
            if len(rec) < need:
                raise BadRow(f"expected {len(header)} columns, got {len(rec)}")
            for k, name in ((ti, columns["t"]), (ii, columns["in"]), (oi, columns["out"])):
                problem = bad_utf8(rec[k])
                if problem:
                    raise BadRow(f"{name}: {problem}")
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
