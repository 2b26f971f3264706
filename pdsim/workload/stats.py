"""Workload statistics: arrival rate over time, ISL/OSL distributions, prefix reuse.

Everything is computed from a RequestTable with numpy (no per-request Python loop), so a trace
of millions of rows takes seconds. ``workload_stats`` returns plain JSON-serialisable data.
"""
from __future__ import annotations

import numpy as np

from .table import RequestTable

_NICE_BINS_S = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600,
                900, 1800, 3600, 7200, 21600, 86400)


def _prefix_scan(table: RequestTable) -> tuple[np.ndarray, int]:
    """(hit blocks per request, number of distinct block ids); see ``prefix_hit_blocks``."""
    n = len(table)
    if table.hash_ids is None or n == 0:
        return np.zeros(n, dtype=np.int64), 0
    lens = np.fromiter((len(h) for h in table.hash_ids), dtype=np.int64, count=n)
    total = int(lens.sum())
    if total == 0:
        return np.zeros(n, dtype=np.int64), 0
    flat = np.concatenate(table.hash_ids).astype(np.int64, copy=False)
    req = np.repeat(np.arange(n), lens)
    uniq, first_pos, inv = np.unique(flat, return_index=True, return_inverse=True)
    seen = req[first_pos][inv] < req  # the id first appeared in an earlier request
    pos_in_req = np.arange(total) - np.repeat(np.cumsum(lens) - lens, lens)
    hits = lens.copy()  # all blocks seen unless an unseen one comes first
    miss = ~seen
    first_miss_req, idx = np.unique(req[miss], return_index=True)  # req is sorted: first miss of each
    hits[first_miss_req] = pos_in_req[miss][idx]
    return hits, len(uniq)


def prefix_hit_blocks(table: RequestTable) -> np.ndarray:
    """Per request, how many leading prompt blocks an infinite prefix cache already holds: the
    run of its first ``hash_ids`` that appeared in earlier requests (ids are prefix-chained,
    so the first unseen block ends the match). Zeros without hash ids."""
    return _prefix_scan(table)[0]


def prefix_hit_tokens(table: RequestTable) -> np.ndarray:
    """Per request, prompt tokens an infinite prefix cache would serve: hit blocks x block
    size, capped at the prompt (a partial last block counts its own tokens only)."""
    return np.minimum(prefix_hit_blocks(table) * table.block_size, table.input_len)


def prefix_reuse_ratio(table: RequestTable) -> float:
    """Share of all prompt tokens an infinite prefix cache would serve (0 without hash ids).
    The Mooncake FAST'25 conversation trace gives 0.3736."""
    total = int(table.input_len.sum())
    return float(prefix_hit_tokens(table).sum() / total) if total else 0.0


def length_summary(x: np.ndarray) -> dict:
    """Mean, std, min, percentiles and max of token lengths."""
    if not len(x):
        return {k: 0.0 for k in ("mean", "std", "min", "p50", "p90", "p95", "p99", "max")}
    p50, p90, p95, p99 = np.percentile(x, [50, 90, 95, 99])
    return {"mean": float(x.mean()), "std": float(x.std()), "min": int(x.min()), "p50": float(p50),
            "p90": float(p90), "p95": float(p95), "p99": float(p99), "max": int(x.max())}


def histogram(x: np.ndarray, bins: int = 60) -> dict:
    """Integer-aligned histogram of lengths: ``edges`` (len counts + 1) and ``counts``."""
    if not len(x):
        return {"edges": [0.0, 1.0], "counts": [0]}
    lo, hi = int(x.min()), int(x.max())
    width = max(1, int(np.ceil((hi - lo + 1) / bins)))
    edges = np.arange(lo, hi + width + 1, width, dtype=np.float64)
    counts, _ = np.histogram(x, bins=edges)
    return {"edges": edges.tolist(), "counts": counts.tolist()}


def pick_bin_s(duration_s: float, target_bins: int = 60) -> float:
    """A round time-bin width (s) giving about ``target_bins`` bins over ``duration_s``."""
    if duration_s <= 0:
        return 1.0
    want = duration_s / target_bins
    return next((b for b in _NICE_BINS_S if b >= want), _NICE_BINS_S[-1])


def workload_stats(table: RequestTable, bin_s: float | None = None, bins: int = 60) -> dict:
    """Summary statistics of a request table.

    Keys: ``requests``, ``duration_s`` (first to last arrival), ``mean_rate`` (req/s),
    ``peak_rate`` (busiest bin, req/s), ``interarrival_cv`` and ``burstiness`` (1/CV^2, the
    gamma shape bench_serving would use), ``input_len``/``output_len`` summaries and
    ``input_hist``/``output_hist``, token totals and rates, ``prefix_reuse_ratio`` (tokens,
    infinite cache), ``prefix_block_reuse_ratio`` (blocks), ``unique_blocks``; time series per
    ``rate_bin_s`` bin: ``rate_edges_s`` (bin starts), ``rate_series`` (req/s),
    ``reuse_series`` (reused share of the bin's prompt tokens); ``skipped_rows``,
    ``max_concurrency``, ``source``.
    """
    n = len(table)
    a = table.arrival_s - table.arrival_s[0] if n else table.arrival_s
    dur = table.duration_s
    bin_s = float(bin_s or pick_bin_s(dur))
    nb = max(1, int(np.ceil(dur / bin_s))) if dur > 0 else 1
    edges = np.arange(nb + 1) * bin_s
    which = np.minimum((a / bin_s).astype(np.int64), nb - 1) if n else np.zeros(0, dtype=np.int64)
    counts = np.bincount(which, minlength=nb)
    gaps = np.diff(table.arrival_s)
    cv = float(gaps.std() / gaps.mean()) if len(gaps) > 1 and gaps.mean() > 0 else 0.0
    hit_blocks, n_unique = _prefix_scan(table)
    hits = np.minimum(hit_blocks * table.block_size, table.input_len)
    inp_bin = np.bincount(which, weights=table.input_len, minlength=nb)
    hit_bin = np.bincount(which, weights=hits, minlength=nb)
    total_in, total_out = int(table.input_len.sum()), int(table.output_len.sum())
    has_hash = table.hash_ids is not None
    nblocks = int(sum(len(h) for h in table.hash_ids)) if has_hash else 0
    return {
        "source": table.source, "requests": n, "duration_s": dur,
        "mean_rate": n / dur if dur > 0 else float("inf"),
        "peak_rate": float(counts.max() / bin_s) if n else 0.0,
        "interarrival_cv": cv, "burstiness": 1.0 / cv**2 if cv > 0 else float("inf"),
        "input_len": length_summary(table.input_len), "output_len": length_summary(table.output_len),
        "input_hist": histogram(table.input_len, bins), "output_hist": histogram(table.output_len, bins),
        "total_input_tokens": total_in, "total_output_tokens": total_out,
        "input_tokens_per_s": total_in / dur if dur > 0 else float("inf"),
        "output_tokens_per_s": total_out / dur if dur > 0 else float("inf"),
        "has_hash_ids": has_hash, "block_size": table.block_size,
        "prefix_reuse_ratio": float(hits.sum() / total_in) if total_in else 0.0,
        "prefix_block_reuse_ratio": float(hit_blocks.sum() / nblocks) if nblocks else 0.0,
        "unique_blocks": n_unique,
        "total_blocks": nblocks,
        "skipped_rows": table.skipped_rows, "max_concurrency": table.max_concurrency,
        "rate_bin_s": bin_s, "rate_edges_s": edges[:-1].tolist(), "rate_series": (counts / bin_s).tolist(),
        "reuse_series": np.divide(hit_bin, inp_bin, out=np.zeros(nb), where=inp_bin > 0).tolist(),
    }
