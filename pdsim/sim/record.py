"""The run record: what one run leaves behind, as plain arrays, simulated or real.

A simulated run (``pdsim.simulate``) and a run against a real server (``pdsim replay``) fill
the same ``RunRecord``; metrics, reports, the dashboard and ``pdsim validate`` read only this.
It holds no simulation objects, so it pickles cheaply and outlives the world.

Units: seconds (``*_s``, simulated or wall-clock time from the run's start), tokens, bytes.
A timestamp that never happened is NaN; an instance index that does not apply is -1.

Token times are kept in one of two shapes (both give every inter-token latency):
- ``StepTokens`` (simulated): each request's first-token time plus, per decode instance, the
  end time of every decode step and the (first, last) step indices of each stretch of steps
  the request took part in; every request in a decode batch shares the step's end time, so no
  per-token storage is needed.
- ``ExplicitTokens`` (real): every token's arrival time, CSR layout (``offsets`` into ``times``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

# per-request columns, in table order; floats are seconds unless named otherwise
REQUEST_FLOAT = (
    "arrival_s", "routed_s", "prefill_start_s", "prefill_end_s", "transfer_start_s", "transfer_end_s",
    "decode_alloc_s", "decode_admit_s", "first_token_s", "finish_s", "transfer_bytes", "kv_load_s", "d_load_s",
)
REQUEST_INT = (
    "request_id", "input_len", "output_len", "cached_tokens", "prefill_instance", "decode_instance",
    "preemptions", "recompute_tokens", "loaded_tokens", "recomputes", "retries", "priority",
)
# the request table's column order (drop_reason is a string or None)
REQUEST_COLUMNS = (
    "request_id", "arrival_s", "input_len", "output_len", "cached_tokens", "prefill_instance",
    "decode_instance", "routed_s", "prefill_start_s", "prefill_end_s", "transfer_start_s",
    "transfer_end_s", "decode_alloc_s", "decode_admit_s", "first_token_s", "finish_s",
    "drop_reason", "preemptions", "recompute_tokens", "transfer_bytes", "kv_load_s", "loaded_tokens",
    "d_load_s", "recomputes", "retries", "priority",
)
# per-step columns of an instance's step log
STEP_COLUMNS = ("time_s", "step_s", "prefill_tokens", "running_batch", "kv_used", "queue_depth")


def empty_requests(n: int) -> dict[str, np.ndarray]:
    """Request columns for ``n`` requests: NaN floats, -1 instances, 0 counters, no drop reason."""
    cols: dict[str, np.ndarray] = {c: np.full(n, np.nan) for c in REQUEST_FLOAT}
    for c in REQUEST_INT:
        cols[c] = np.full(n, -1 if c.endswith("_instance") else 0, dtype=np.int64)
    for c in ("transfer_bytes", "kv_load_s", "d_load_s"):
        cols[c] = np.zeros(n)
    cols["request_id"] = np.arange(n, dtype=np.int64)
    cols["drop_reason"] = np.full(n, None, dtype=object)
    return cols


class TokenTimes(Protocol):
    def itl_samples(self, first_token_s: np.ndarray, finished: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(every inter-token gap of finished requests, per-request worst gap; NaN for < 2 tokens), seconds."""
        ...


@dataclass
class ExplicitTokens:
    """Every token's time (seconds), request r's tokens at ``times[offsets[r]:offsets[r+1]]``."""

    offsets: np.ndarray  # int64, length n + 1
    times: np.ndarray  # float64

    @classmethod
    def from_lists(cls, per_request: list[list[float]]) -> "ExplicitTokens":
        lens = np.fromiter((len(t) for t in per_request), dtype=np.int64, count=len(per_request))
        offsets = np.zeros(len(per_request) + 1, dtype=np.int64)
        np.cumsum(lens, out=offsets[1:])
        times = np.fromiter((x for t in per_request for x in t), dtype=np.float64, count=int(offsets[-1]))
        return cls(offsets, times)

    def itl_samples(self, first_token_s: np.ndarray, finished: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = len(self.offsets) - 1
        req_max = np.full(n, np.nan)
        gaps = np.diff(self.times)
        # a gap belongs to a request when both its tokens do: drop the gaps across request borders
        owner = np.repeat(np.arange(n), np.diff(self.offsets))
        same = owner[1:] == owner[:-1] if len(owner) > 1 else np.zeros(0, dtype=bool)
        keep = same & finished[owner[1:]] if len(owner) > 1 else same
        g, o = gaps[keep], owner[1:][keep]
        np.fmax.at(req_max, o, g)
        return g, req_max


@dataclass
class StepTokens:
    """Simulated token times: tokens 2..N of a request are decode-step ends on the instances
    it decoded on. ``seg_*``: one entry per stretch of consecutive decode steps a request took
    part in on one instance (in the order they happened); ``step_end[i]``: instance i's
    decode-step end times."""

    seg_request: np.ndarray  # int64
    seg_instance: np.ndarray  # int64
    seg_first: np.ndarray  # int64, first decode-step index of the stretch
    seg_last: np.ndarray  # int64, last decode-step index (inclusive)
    step_end: list[np.ndarray]

    def itl_samples(self, first_token_s: np.ndarray, finished: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = len(first_token_s)
        req_max = np.full(n, np.nan)
        keep = finished[self.seg_request] if len(self.seg_request) else np.zeros(0, dtype=bool)
        rid, inst = self.seg_request[keep], self.seg_instance[keep]
        a, b = self.seg_first[keep], self.seg_last[keep]
        if not len(rid):
            return np.empty(0), req_max
        # the token before each stretch: the first token, or the previous stretch's last step end
        prev = np.empty(len(rid))
        base = np.zeros(len(self.step_end) + 1, dtype=np.int64)
        np.cumsum([len(e) for e in self.step_end], out=base[1:])
        all_ends = np.concatenate(self.step_end) if self.step_end else np.empty(0)
        last_end = all_ends[base[inst] + b]
        new_req = np.ones(len(rid), dtype=bool)
        new_req[1:] = rid[1:] != rid[:-1]
        prev[new_req] = first_token_s[rid[new_req]]
        prev[~new_req] = last_end[np.flatnonzero(~new_req) - 1]
        chunks = []
        for i in np.unique(inst).tolist():
            m = inst == i
            end = self.step_end[i]
            r_i, a_i, b_i, p_i = rid[m], a[m], b[m], prev[m]
            head = end[a_i] - p_i  # gap from the previous token to the stretch's first decode token
            chunks.append(head)
            np.fmax.at(req_max, r_i, head)
            lengths = b_i - a_i
            mm = lengths > 0
            if mm.any():
                d_end = np.diff(end, prepend=np.nan)
                L = lengths[mm]
                starts = np.cumsum(L) - L
                idx = np.arange(L.sum()) - np.repeat(starts, L) + np.repeat(a_i[mm] + 1, L)
                vals = d_end[idx]
                chunks.append(vals)
                np.fmax.at(req_max, r_i[mm], np.maximum.reduceat(vals, starts))
        return (np.concatenate(chunks) if chunks else np.empty(0)), req_max


@dataclass(frozen=True)
class InstanceInfo:
    """An instance of the run: its name, role, GPUs and end-of-run counters."""

    name: str
    role: str  # prefill | decode | colocated (real runs: 'server')
    gpus: int
    kv_capacity_pages: int = 0
    kv_peak_pages: int = 0
    busy_s: float = 0.0
    tokens_out: int = 0
    retractions: int = 0


@dataclass
class RunRecord:
    """Everything a run leaves behind (see the module docstring)."""

    name: str
    kind: str  # 'simulated' | 'real'
    requests: dict[str, np.ndarray]  # REQUEST_COLUMNS, one entry per request, ordered by request id
    tokens: TokenTimes
    instances: list[InstanceInfo]
    gpus: int
    nodes: float
    slo: dict[str, float | None]  # ttft_ms, itl_ms, tpot_ms, e2e_ms
    end_s: float  # simulated (or wall) time at the end of the run
    wall_s: float = 0.0  # wall time the run took
    events: int = 0  # engine steps simulated
    disaggregated: bool = False
    steps: list[dict[str, np.ndarray]] = field(default_factory=list)  # per instance, STEP_COLUMNS
    tier_usage: list[tuple[str, float, np.ndarray, np.ndarray]] = field(default_factory=list)  # (tier, cap, t, used)
    link_usage: dict[str, np.ndarray] = field(default_factory=dict)  # time_s, link (codes), bytes_per_s, flows
    link_names: list[str] = field(default_factory=list)
    link_capacity: dict[str, float] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)  # tiers, prefix caches, receive buffers, ...
    meta: dict[str, Any] = field(default_factory=dict)  # provenance: scenario file, endpoint, versions, ...

    def __len__(self) -> int:
        return len(self.requests["request_id"])
