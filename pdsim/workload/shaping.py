"""Load shaping: when requests arrive, independent of what they ask for.

- Open loop: gamma inter-arrival times (``sglang.bench_serving`` / ``vllm bench serve``
  ``--burstiness``; shape 1 is Poisson), exponential (Poisson), constant gaps, or a trace's own
  timestamps (optionally scaled).
- Closed loop: every request ready at t=0 with at most ``concurrency`` in flight (the world
  starts the next one when one finishes, as ``--max-concurrency`` does).
- Time scaling of a trace: inter-arrival times multiplied by a factor (smaller = heavier).
- Sweeps: the same workload at several request rates or trace time scales.

Times are seconds, rates requests/second.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..specs.errors import SpecError
from ..specs.workload import WorkloadSpec
from .table import RequestTable


def arrivals(n: int, rate: float | None, burstiness: float, rng: np.random.Generator,
             process: str = "gamma") -> np.ndarray:
    """``n`` arrival times (s), the first at 0.

    ``rate`` None: all at t=0. ``gamma``: gaps of shape ``burstiness`` and mean 1/rate, so the
    squared coefficient of variation of the gaps is 1/burstiness (bench_serving's model);
    ``poisson``: exponential gaps (gamma of shape 1); ``constant``: gaps of exactly 1/rate.
    """
    if rate is None or n == 0:
        return np.zeros(n)
    if rate <= 0:
        raise SpecError(f"must be > 0, got {rate}", field="rate")
    if process == "constant":
        gaps = np.full(n, 1.0 / rate)
    elif process in ("gamma", "poisson"):
        shape = 1.0 if process == "poisson" else burstiness
        if shape <= 0:
            raise SpecError(f"must be > 0, got {burstiness}", field="burstiness")
        gaps = rng.gamma(shape, 1.0 / (rate * shape), size=n)
    else:
        raise SpecError(f"expected one of 'gamma', 'poisson', 'constant', got {process!r}", field="arrival")
    gaps[0] = 0.0  # the clock starts with the first request
    return np.cumsum(gaps)


def with_arrivals(table: RequestTable, arrival_s: np.ndarray) -> RequestTable:
    """The same requests (lengths, hash ids) at new arrival times (s, non-decreasing)."""
    a = np.asarray(arrival_s, dtype=np.float64)
    if len(a) != len(table):
        raise ValueError(f"{len(a)} arrival times for {len(table)} requests")
    if len(a) > 1 and (np.diff(a) < 0).any():
        raise ValueError("arrival times must be non-decreasing")
    return RequestTable(a, table.input_len, table.output_len, table.hash_ids, table.block_size,
                        table.max_concurrency, table.source, table.skipped_rows, dict(table.meta), table.priority)


def open_loop(table: RequestTable, rate: float, burstiness: float = 1.0, seed: int = 0,
              process: str = "gamma") -> RequestTable:
    """Replace a table's arrival times by an open-loop process at ``rate`` req/s (its order
    and lengths are kept)."""
    t = arrivals(len(table), rate, burstiness, np.random.default_rng(seed), process)
    return with_arrivals(table, t)


def closed_loop(table: RequestTable, concurrency: int) -> RequestTable:
    """Every request ready at t=0 with at most ``concurrency`` in flight (a fixed number of
    clients that each send the next request when their previous one finishes)."""
    if concurrency < 1:
        raise SpecError(f"must be >= 1, got {concurrency}", field="max_concurrency")
    out = with_arrivals(table, np.zeros(len(table)))
    out.max_concurrency = int(concurrency)
    return out


def scale_time(table: RequestTable, factor: float) -> RequestTable:
    """Multiply inter-arrival times by ``factor`` (smaller = heavier load): the duration scales
    by ``factor`` and the order is kept."""
    if not factor > 0:
        raise SpecError(f"time scale must be > 0, got {factor}", field="time_scale")
    a = table.arrival_s
    if not len(a):
        return with_arrivals(table, a)
    return with_arrivals(table, a[0] + (a - a[0]) * factor)


def rate_sweep(spec: WorkloadSpec, rates: list[float]) -> list[WorkloadSpec]:
    """The same workload at several request rates (req/s), as serving engineers sweep load.

    A trace spec gets new arrival times at each rate (its lengths are kept); use
    ``scale_sweep`` to keep a trace's own arrival pattern instead.
    """
    out = []
    for r in rates:
        if not (isinstance(r, (int, float)) and r > 0):
            raise SpecError(f"rates must be > 0, got {r!r}", field="rate")
        out.append(replace(spec, rate=float(r)))
    return out


def scale_sweep(spec: WorkloadSpec, factors: list[float]) -> list[WorkloadSpec]:
    """A trace spec at several time scales (smaller = heavier): its arrival pattern is kept."""
    if spec.kind != "trace" or spec.trace is None:
        raise SpecError("scale_sweep needs kind: trace (use rate_sweep for generated workloads)", field="kind")
    out = []
    for k in factors:
        if not (isinstance(k, (int, float)) and k > 0):
            raise SpecError(f"time scales must be > 0, got {k!r}", field="trace.time_scale")
        out.append(replace(spec, trace=replace(spec.trace, time_scale=float(k))))
    return out
