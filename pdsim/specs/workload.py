"""Workload specs: where requests come from (generator or trace) and how they arrive.

Pure data; ``pdsim.workload.materialize`` turns a spec into a columnar request table.
Lengths are tokens, rates requests/second, times seconds unless the name says otherwise.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ._convert import check


@dataclass(frozen=True)
class LengthDist:
    """A token-length distribution (genai-bench notation in brackets).

    - ``fixed``: always ``value`` [D(value)]
    - ``uniform``: integers in [min, max] [U(min,max)]
    - ``normal``: N(mean, std) rounded, truncated to [min, max] [N(mean,std)]
    - ``lognormal``: mean/std of the lengths themselves (not of the log), truncated to [min, max]
    - ``random_ratio``: bench_serving's random dataset, uniform in [value*range_ratio, value]
    """

    dist: Literal["fixed", "uniform", "normal", "lognormal", "random_ratio"] = "fixed"
    value: int = 0
    mean: float = 0.0
    std: float = 0.0
    min: int = 1
    max: int = 1_000_000
    range_ratio: float = 1.0

    def __post_init__(self) -> None:
        if self.dist in ("fixed", "random_ratio"):
            check(self.value >= 1, f"dist {self.dist} needs value >= 1, got {self.value}", "value")
        if self.dist in ("normal", "lognormal"):
            check(self.mean > 0, f"dist {self.dist} needs mean > 0", "mean")
            check(self.std >= 0, "must be >= 0", "std")
        check(self.min >= 1, "must be >= 1 (a request has at least one token)", "min")
        check(self.max >= self.min, f"must be >= min ({self.min})", "max")
        check(0.0 <= self.range_ratio <= 1.0, "must be in [0, 1]", "range_ratio")


@dataclass(frozen=True)
class TraceSpec:
    """A recorded arrival trace replayed with a time scale (smaller = heavier load)."""

    path: str
    format: Literal["auto", "mooncake", "azure", "burstgpt", "jsonl"] = "auto"
    time_scale: float = 1.0  # inter-arrival times are multiplied by this
    limit: int | None = None  # first N requests
    start_s: float = 0.0  # skip requests before this trace time
    skip_bad_rows: bool = False

    def __post_init__(self) -> None:
        check(self.time_scale > 0, f"must be > 0, got {self.time_scale}", "time_scale")
        check(self.limit is None or self.limit >= 1, "must be >= 1", "limit")


@dataclass(frozen=True)
class WorkloadSpec:
    """Request stream of a scenario.

    ``kind``:
    - ``fixed_batch``: ``batch_size`` requests of ``input``/``output`` all at t=0
      (sglang.bench_one_batch_server).
    - ``synthetic``: ``num_requests`` with lengths from ``input``/``output``, open loop at
      ``rate`` req/s (gamma inter-arrivals of shape ``burstiness``; 1 = Poisson, as
      bench_serving), or all at once when ``rate`` is null; ``max_concurrency`` caps requests
      in flight (closed loop when every request is ready at t=0).
    - ``trace``: replay ``trace``.
    """

    kind: Literal["fixed_batch", "synthetic", "trace"] = "synthetic"
    num_requests: int = 1000
    batch_size: int = 1
    rate: float | None = None
    burstiness: float = 1.0
    arrival: Literal["gamma", "constant"] = "gamma"
    max_concurrency: int | None = None
    input: LengthDist = field(default_factory=lambda: LengthDist("fixed", value=1024))
    output: LengthDist = field(default_factory=lambda: LengthDist("fixed", value=256))
    trace: TraceSpec | None = None

    def __post_init__(self) -> None:
        check(self.num_requests >= 1, "must be >= 1", "num_requests")
        check(self.batch_size >= 1, "must be >= 1", "batch_size")
        check(self.rate is None or self.rate > 0, f"must be > 0 (or null for all at t=0), got {self.rate}", "rate")
        check(self.burstiness > 0, "must be > 0 (1 = Poisson)", "burstiness")
        check(self.max_concurrency is None or self.max_concurrency >= 1, "must be >= 1", "max_concurrency")
        if self.kind == "trace":
            check(self.trace is not None, "kind: trace needs a trace: block with a path", "trace")
