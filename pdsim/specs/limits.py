"""Size limits checked before anything is built, so a typo like ``count: 1e9`` is an error
message and not an exhausted machine. Each limit can be raised with an environment variable
(the message says which); the defaults hold the largest deployments pdsim is meant for with
room to spare, within this project's 24 GiB machines.
"""
from __future__ import annotations

import os

from .errors import SpecError


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        v = int(raw)
    except ValueError:
        raise SpecError(f"expected an integer, got {raw[:40]!r}", source=f"environment {name}") from None
    if v < 1:
        raise SpecError(f"must be >= 1, got {v}", source=f"environment {name}")
    return v


def max_instances() -> int:
    """Instances in one simulated cluster (each is a SimPy process with its own KV pool)."""
    return _env_int("PDSIM_MAX_INSTANCES", 10_000)


def max_gpus() -> int:
    """GPUs in one simulated cluster."""
    return _env_int("PDSIM_MAX_GPUS", 200_000)


def check_at_most(value: int, limit: int, what: str, env: str, *, source: str | None, field: str) -> None:
    if value > limit:
        raise SpecError(f"{value:,} {what}; pdsim simulates at most {limit:,} (set {env} to raise the limit)",
                        source=source, field=field)


def check_range(value: float | None, lo: float, hi: float, field: str, unit: str = "", *,
                why: str = "", allow_none: bool = False) -> None:
    """Refuse ``value`` outside [lo, hi] with a message naming the bounds (and why they are
    there). Bounds on rates, intervals and counts keep a run's work finite and its clock
    readable: an interval of 1e-9 s or 10^12 retries would run for ever, a 1e300 ms overhead
    overflows every latency."""
    if value is None:
        if allow_none:
            return
        raise SpecError("must be a number, got null", field=field)
    if not lo <= value <= hi:
        u = f" {unit}" if unit else ""
        why_s = f" ({why})" if why else ""
        def fmt(x: float) -> str:
            return f"{x:,}" if isinstance(x, int) else f"{x:g}"
        raise SpecError(f"must be in [{fmt(lo)}, {fmt(hi)}]{u}{why_s}, got {fmt(value)}", field=field)
