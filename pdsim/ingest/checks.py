"""Field checks of the real-run readers: every value a file gives is checked before it is used,
and a bad one is a SpecError naming the file, the line (or run) and the field.

Same standard as scenario and trace fields (workload/trace_rows.py, whose ``length`` and
``number`` these wrap): token counts are integers in [1, MAX_TOKENS] (0 where a failed request
may have none), times are finite seconds, seeds fit numpy's, and nothing is allocated by a
count a file declares before that count is checked.
"""
from __future__ import annotations

import math
from pathlib import Path

from ..specs.errors import SpecError
from ..specs.workload import MAX_SPAN_S, MAX_TOKENS
from ..specs.yamlio import excerpt
from ..workload.trace_rows import BadRow, length

# several tokens per streamed chunk (speculative decoding, server-side batching of the stream):
# a few to a few dozen; past this a record's token count does not match its chunks
MAX_TOKENS_PER_CHUNK = 256


def fail(p: Path, where: str, field: str, what: str) -> SpecError:
    """``FILE: line N: field: what`` (``where`` is ``line N: `` or empty)."""
    return SpecError(f"{where}{field}: {what}", source=str(p))


def tokens(v, p: Path, where: str, field: str, zero_ok: bool = False) -> int:
    """A token count from a file: an integer in [1, MAX_TOKENS] ([0, ...] with ``zero_ok``)."""
    if zero_ok and (v == 0 and not isinstance(v, bool)):
        return 0
    try:
        return length(v, field)
    except BadRow as err:
        raise SpecError(f"{where}{err}", source=str(p)) from None


def seconds(v, p: Path, where: str, field: str, signed: bool = False) -> float:
    """A finite time in seconds: a duration (>= 0, at most pdsim's span of arrivals), or with
    ``signed`` a clock reading (any finite value: the span is checked on the differences)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise fail(p, where, field, f"expected a number of seconds, got {excerpt(v)}")
    try:
        x = float(v)
    except OverflowError:
        x = math.inf
    if not math.isfinite(x):
        raise fail(p, where, field, f"expected a finite number, got {excerpt(v)}")
    if signed:
        return x
    if x < 0:
        raise fail(p, where, field, f"expected a time >= 0, got {excerpt(v)}")
    if x > MAX_SPAN_S:
        raise fail(p, where, field, f"{x:.3g} s is more than the {MAX_SPAN_S / (365 * 86400):.0f} years pdsim "
                                    "simulates")
    return x


def seconds_list(v, p: Path, where: str, field: str) -> list[float]:
    """A list of non-negative finite times (inter-token gaps)."""
    if not isinstance(v, list):
        raise fail(p, where, field, f"expected a list of times, got {excerpt(v)}")
    return [seconds(x, p, where, f"{field}[{i}]") for i, x in enumerate(v)]


def seed(v, p: Path, where: str, field: str = "seed") -> int:
    """A benchmark's random seed: an integer in [0, 2**32 - 1] (numpy's seeds)."""
    if type(v) is not int or not 0 <= v < 2**32:
        raise fail(p, where, field, f"expected an integer in [0, 2**32 - 1], got {excerpt(v)}")
    return v


def rate(v, p: Path, where: str, field: str = "request_rate") -> float | None:
    """A request rate (req/s): a number > 0, ``inf``/``"inf"`` (all sent at once) or absent."""
    if v is None:
        return None
    if isinstance(v, str) and v.strip().lower() in ("inf", "infinity"):
        return math.inf
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (v > 0):  # also NaN
        raise fail(p, where, field, f"expected a rate > 0 in requests/s or inf, got {excerpt(v)}")
    return float(v)


def positive(v, p: Path, where: str, field: str) -> float | None:
    """A finite number > 0, or None when absent."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 < v < math.inf):
        raise fail(p, where, field, f"expected a finite number > 0, got {excerpt(v)}")
    return float(v)


def concurrency(v, p: Path, where: str, field: str) -> int | None:
    """A closed loop's number of users: an integer >= 1 (None when absent)."""
    if v is None:
        return None
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if type(v) is not int or v < 1:
        raise fail(p, where, field, f"expected an integer >= 1, got {excerpt(v)}")
    return v
