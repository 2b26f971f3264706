"""The columnar request table every workload source produces and the world consumes."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np


@dataclass
class RequestTable:
    """Requests in arrival order.

    arrival_s: arrival time of each request, seconds from the start (non-decreasing).
    input_len / output_len: prompt tokens and tokens to generate (>= 1).
    hash_ids: per request, the ids of its ``block_size``-token prompt blocks, prefix-chained
      (Mooncake trace convention: equal id k implies equal blocks before it), or None.
    max_concurrency: closed loop / bench_serving ``--max-concurrency``: at most this many
      requests in flight; a request starts at max(arrival, a slot frees up).
    source: where the requests came from (a trace path or a generator name), for reports.
    skipped_rows: malformed trace rows skipped under ``skip_bad_rows`` (0 otherwise).
    meta: provenance a source recorded (e.g. a benchmark result's ``request_rate``); free-form,
      never read by the simulator.
    priority: per request, its priority class (an integer; what the batch schedulers
      ``priority`` / ``priority-low-first`` order by), or None (every request class 0).
    """

    arrival_s: np.ndarray
    input_len: np.ndarray
    output_len: np.ndarray
    hash_ids: list[np.ndarray] | None = None
    block_size: int = 512
    max_concurrency: int | None = None
    source: str = ""
    skipped_rows: int = 0  # bad trace rows skipped (skip_bad_rows)
    meta: dict = field(default_factory=dict)
    priority: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.arrival_s = np.asarray(self.arrival_s, dtype=np.float64)
        self.input_len = np.asarray(self.input_len, dtype=np.int64)
        self.output_len = np.asarray(self.output_len, dtype=np.int64)
        n = len(self.arrival_s)
        if len(self.input_len) != n or len(self.output_len) != n:
            raise ValueError("arrival_s, input_len and output_len must have the same length")
        if self.hash_ids is not None and len(self.hash_ids) != n:
            raise ValueError("hash_ids must have one entry per request")
        if self.priority is not None:
            self.priority = np.asarray(self.priority, dtype=np.int64)
            if len(self.priority) != n:
                raise ValueError("priority must have one entry per request")

    def __len__(self) -> int:
        return len(self.arrival_s)

    def head(self, n: int) -> "RequestTable":
        """The first ``n`` requests (all of them where there are fewer), every column kept."""
        return dataclasses.replace(
            self, arrival_s=self.arrival_s[:n], input_len=self.input_len[:n], output_len=self.output_len[:n],
            hash_ids=self.hash_ids[:n] if self.hash_ids is not None else None,
            priority=self.priority[:n] if self.priority is not None else None, meta=dict(self.meta))

    @property
    def duration_s(self) -> float:
        return float(self.arrival_s[-1] - self.arrival_s[0]) if len(self) else 0.0
