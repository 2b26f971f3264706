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

from .columns import column_part, column_rows

#: log rows read at a time where a whole log would be read (bounds the memory of a spilled log)
PART_ROWS = 1 << 20

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
STEP_COLUMNS = ("time_s", "step_s", "prefill_tokens", "running_batch", "kv_used", "queue_depth", "kv_cached")


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


class GapHistogram:
    """A multiset of inter-token gaps (seconds): ``values[i]`` occurs ``counts[i]`` times.

    Simulated runs produce it without expanding a gap per token (every request in a decode
    step shares the step's gap), so a run's ITL statistics cost memory in engine steps, not in
    tokens. Statistics equal NumPy's on the expanded array: quantiles use the same linear
    interpolation (bit for bit); the mean and standard deviation are the weighted sums (equal
    up to float summation order). The values are sorted once, on first use."""

    __slots__ = ("values", "_counts", "_cum", "_mean", "_std")

    def __init__(self, values: np.ndarray, counts: np.ndarray):
        self.values = np.asarray(values, dtype=np.float64)
        self._counts: np.ndarray | None = np.asarray(counts, dtype=np.int64)
        self._cum: np.ndarray | None = None  # cumulative counts once the values are sorted
        self._mean: float | None = None
        self._std: float | None = None

    @classmethod
    def of(cls, samples: np.ndarray) -> "GapHistogram":
        v = np.asarray(samples, dtype=np.float64)
        return cls(v, np.ones(len(v), dtype=np.int64))

    @property
    def counts(self) -> np.ndarray:
        """How often each of ``values`` occurs."""
        return self._counts if self._cum is None else np.diff(self._cum, prepend=0)

    @property
    def n(self) -> int:
        return int(self._counts.sum()) if self._cum is None else int(self._cum[-1]) if len(self._cum) else 0

    def _order(self) -> tuple[np.ndarray, np.ndarray]:
        """(values sorted, cumulative counts in that order). Sorting happens once and in place
        (the pairs are a multiset: their order carries nothing); the mean and standard deviation
        are taken first, so they keep the summation order of the values as given."""
        if self._cum is None:
            if len(self.values):
                self.mean()
                self.std()
            order = np.argsort(self.values, kind="stable")
            self.values = self.values[order]
            counts = self._counts[order]
            del order
            self._counts = None
            self._cum = np.cumsum(counts)
        return self.values, self._cum

    def expand(self) -> np.ndarray:
        """Every gap (sorted by value), as an array."""
        v, c = self._order()
        return np.repeat(v, np.diff(c, prepend=0))

    def sample(self, k: int, seed: int = 0) -> np.ndarray:
        """``k`` gaps drawn without replacement (all of them, expanded, when there are fewer):
        for figures of very large runs."""
        n = self.n
        if n <= k:
            return self.expand()
        v, c = self._order()
        pos = np.sort(np.random.default_rng(seed).choice(n, size=k, replace=False))
        return v[np.searchsorted(c, pos, side="right")]

    def finite(self) -> "GapHistogram":
        keep = ~np.isnan(self.values)
        return self if keep.all() else GapHistogram(self.values[keep], self.counts[keep])

    def mean(self) -> float:
        if self._mean is None:
            self._mean = float(np.dot(self.values, self.counts) / self.n)
        return self._mean

    def std(self) -> float:
        if self._std is None:
            m = self.mean()
            self._std = float(np.sqrt(np.dot((self.values - m) ** 2, self.counts) / self.n))
        return self._std

    def percentile(self, q: float) -> float:
        """``np.percentile(expanded, q)`` (linear method) without expanding."""
        return float(self.quantiles(np.asarray([q / 100.0]))[0])

    def quantiles(self, q: np.ndarray) -> np.ndarray:
        """``np.quantile(expanded, q)`` (linear method) for fractions ``q`` in [0, 1]."""
        v, c = self._order()
        n = int(c[-1])
        h = (n - 1) * np.asarray(q, dtype=np.float64)
        lo = np.floor(h)
        t = h - lo
        lo = lo.astype(np.int64)
        hi = np.minimum(lo + 1, n - 1)
        a = v[np.searchsorted(c, lo, side="right")]
        b = v[np.searchsorted(c, hi, side="right")]
        d = b - a
        # NumPy's _lerp: from the nearer end, so an interpolation at t = 1 returns b exactly
        return np.where(t >= 0.5, b - d * (1.0 - t), a + d * t)


class TokenTimes(Protocol):
    def itl_histogram(self, first_token_s: np.ndarray, finished: np.ndarray) -> tuple[GapHistogram, np.ndarray]:
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

    def itl_histogram(self, first_token_s: np.ndarray, finished: np.ndarray) -> tuple[GapHistogram, np.ndarray]:
        g, req_max = self.itl_samples(first_token_s, finished)
        return GapHistogram.of(g), req_max

    def itl_samples(self, first_token_s: np.ndarray, finished: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        req_max = np.full(len(self.offsets) - 1, np.nan)
        g, o = self.itl_owned(finished)
        np.fmax.at(req_max, o, g)
        return g, req_max

    def itl_owned(self, finished: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(every inter-token gap of the finished requests (s), the index of the request it belongs to)."""
        n = len(self.offsets) - 1
        gaps = np.diff(self.times)
        # a gap belongs to a request when both its tokens do: drop the gaps across request borders
        owner = np.repeat(np.arange(n), np.diff(self.offsets))
        same = owner[1:] == owner[:-1] if len(owner) > 1 else np.zeros(0, dtype=bool)
        keep = same & finished[owner[1:]] if len(owner) > 1 else same
        return gaps[keep], owner[1:][keep]


class DecodeEnds:
    """Each instance's decode-step end times (s, as the client sees the token), computed from
    its step log when read instead of held beside it (8 bytes per engine step saved).

    ``parts[i]``: (instance i's step columns, the run's end time, indices of steps a failure
    cut short, egress seconds). A decode step's end is ``time_s + step_s`` of a logged step with
    a decode batch that ended by the end of the run and was not cut, plus the egress: the same
    sums the engine computed for its clock (clock.py), so its token times bit for bit."""

    __slots__ = ("parts",)

    def __init__(self, parts: list[tuple[dict, float, tuple, float]]):
        self.parts = parts

    @staticmethod
    def done_mask(steps: dict, end_s: float, cut: tuple, lo: int = 0, hi: int | None = None) -> np.ndarray:
        """Which logged steps (rows ``lo:hi``) produced decode tokens."""
        t, d = column_part(steps, "time_s", lo, hi), column_part(steps, "step_s", lo, hi)
        done = column_part(steps, "running_batch", lo, hi) > 0
        # a step still in flight when the run ended (its end lies past the last event) made no tokens
        done &= t + d <= end_s
        if cut:
            c = np.asarray(cut)
            c = c[(c >= lo) & (c < lo + len(done))] - lo
            done[c] = False
        return done

    @staticmethod
    def done_count(steps, end_s: float, cut: tuple) -> int:
        """How many logged steps produced decode tokens (a part at a time)."""
        rows = column_rows(steps)
        return sum(int(DecodeEnds.done_mask(steps, end_s, cut, lo, lo + PART_ROWS).sum())
                   for lo in range(0, rows, PART_ROWS))

    def __len__(self) -> int:
        return len(self.parts)

    def __getitem__(self, i: int) -> np.ndarray:
        steps, end_s, cut, egress = self.parts[i]
        rows = column_rows(steps)
        parts = []
        # a part of the log at a time: a spilled log is read from disk once, never whole
        for lo in range(0, max(rows, 1), PART_ROWS):
            hi = lo + PART_ROWS
            done = self.done_mask(steps, end_s, cut, lo, hi)
            ends = column_part(steps, "time_s", lo, hi)[done] + column_part(steps, "step_s", lo, hi)[done]
            parts.append(ends + egress if egress else ends)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def __iter__(self):
        return (self[i] for i in range(len(self.parts)))


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
    step_end: "list[np.ndarray] | DecodeEnds"
    # per request, how much later than its engine's step ends the client got its stream (its
    # first token's way out waited for a host core: world.first_token); None = no such shift.
    # Request r's tokens 2..N reach the client at ``step_end`` + ``first_shift[r]``.
    first_shift: np.ndarray | None = None

    #: gaps expanded at a time while finding each request's worst gap (bounds the memory)
    CHUNK_GAPS = 1 << 20

    def itl_histogram(self, first_token_s: np.ndarray, finished: np.ndarray) -> tuple[GapHistogram, np.ndarray]:
        """Every gap of the finished requests as a histogram over decode steps (the gap of
        step s of instance i counts once per finished request that decoded in it and in step
        s - 1), plus each stretch's first gap (from the request's previous token); each
        request's worst gap. Memory: engine steps + stretches, never tokens."""
        n = len(first_token_s)
        req_max = np.full(n, np.nan)
        keep = finished[self.seg_request] if len(self.seg_request) else np.zeros(0, dtype=bool)
        rid, inst = self.seg_request[keep], self.seg_instance[keep]
        a, b = self.seg_first[keep], self.seg_last[keep]
        if not len(rid):
            return GapHistogram(np.empty(0), np.empty(0, dtype=np.int64)), req_max
        # the token before each stretch: the first token, or the previous stretch's last step end
        last_end = np.empty(len(rid))
        for i in np.unique(inst).tolist():
            m = inst == i
            last_end[m] = self.step_end[i][b[m]]
        prev = np.empty(len(rid))
        new_req = np.ones(len(rid), dtype=bool)
        new_req[1:] = rid[1:] != rid[:-1]
        prev[new_req] = first_token_s[rid[new_req]]
        if self.first_shift is not None:  # the stream moved as a whole: gaps between engine times
            prev[new_req] -= self.first_shift[rid[new_req]]
        prev[~new_req] = last_end[np.flatnonzero(~new_req) - 1]
        values, counts = [], []
        for i in np.unique(inst).tolist():
            m = inst == i
            end = self.step_end[i]
            r_i, a_i, b_i = rid[m], a[m], b[m]
            head = end[a_i] - prev[m]  # gap from the previous token to the stretch's first decode token
            values.append(head)
            counts.append(np.ones(len(head), dtype=np.int64))
            np.fmax.at(req_max, r_i, head)
            inner = b_i > a_i
            if not inner.any():
                continue
            d_end = np.diff(end, prepend=np.nan)
            # how many finished stretches cover step s beyond their first step: a difference array
            cover = np.bincount(a_i[inner] + 1, minlength=len(end) + 1).astype(np.int32)
            cover -= np.bincount(b_i[inner] + 1, minlength=len(end) + 1).astype(np.int32)
            np.cumsum(cover, out=cover)
            used = np.flatnonzero(cover[:-1] > 0)
            values.append(d_end[used])
            counts.append(cover[used])
            del cover
            self._worst_inner(d_end, r_i[inner], a_i[inner], b_i[inner], req_max)
        return GapHistogram(np.concatenate(values), np.concatenate(counts)), req_max

    def _worst_inner(self, d_end: np.ndarray, rid: np.ndarray, a: np.ndarray, b: np.ndarray,
                     req_max: np.ndarray) -> None:
        """req_max[r] = max(req_max[r], max(d_end[a+1 : b+1])) per stretch, a chunk of
        stretches at a time."""
        lengths = b - a  # all >= 1
        cum = np.cumsum(lengths)
        lo, n = 0, len(rid)
        while lo < n:
            done = int(cum[lo - 1]) if lo else 0
            hi = max(int(np.searchsorted(cum, done + self.CHUNK_GAPS, side="right")), lo + 1)
            L = lengths[lo:hi]
            starts = np.cumsum(L) - L
            idx = np.arange(int(L.sum())) - np.repeat(starts, L) + np.repeat(a[lo:hi] + 1, L)
            np.fmax.at(req_max, rid[lo:hi], np.maximum.reduceat(d_end[idx], starts))
            lo = hi

    def itl_samples(self, first_token_s: np.ndarray, finished: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Every gap expanded (one float per token: small runs, tests); see itl_histogram."""
        h, req_max = self.itl_histogram(first_token_s, finished)
        return h.expand(), req_max


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
