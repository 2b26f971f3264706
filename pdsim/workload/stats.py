"""Workload statistics: arrival rate over time, ISL/OSL distributions, prefix reuse."""
from __future__ import annotations

import numpy as np

from .table import RequestTable


def prefix_reuse_ratio(table: RequestTable) -> float:
    """Share of prompt tokens an infinite prefix cache would serve: per request, the leading
    blocks already seen in earlier requests (block ids are prefix-chained) x block size,
    capped at the prompt length, over all prompt tokens."""
    if table.hash_ids is None:
        return 0.0
    seen: set[int] = set()
    hit = 0
    B = table.block_size
    for k, ids in enumerate(table.hash_ids):
        m = 0
        for h in ids.tolist():
            if h in seen:
                m += 1
            else:
                break
        hit += min(m * B, int(table.input_len[k]))
        seen.update(ids.tolist())
    total = int(table.input_len.sum())
    return hit / total if total else 0.0


def _dist(x: np.ndarray) -> dict:
    return {"mean": float(x.mean()), "std": float(x.std()), "p50": float(np.percentile(x, 50)),
            "p90": float(np.percentile(x, 90)), "p99": float(np.percentile(x, 99)),
            "min": int(x.min()), "max": int(x.max())}


def workload_stats(table: RequestTable, bin_s: float | None = None) -> dict:
    """Summary statistics of a request table; ``rate_series`` is requests/s per time bin."""
    n = len(table)
    dur = table.duration_s
    bin_s = bin_s or max(1.0, dur / 60) if dur > 0 else 1.0
    edges = np.arange(0.0, dur + bin_s, bin_s) if dur > 0 else np.array([0.0, 1.0])
    counts, _ = np.histogram(table.arrival_s - table.arrival_s[0], bins=edges)
    gaps = np.diff(table.arrival_s)
    cv = float(gaps.std() / gaps.mean()) if len(gaps) > 1 and gaps.mean() > 0 else 0.0
    return {
        "source": table.source, "requests": n, "duration_s": dur,
        "mean_rate": n / dur if dur > 0 else float("inf"), "interarrival_cv": cv,
        "input_len": _dist(table.input_len), "output_len": _dist(table.output_len),
        "total_input_tokens": int(table.input_len.sum()), "total_output_tokens": int(table.output_len.sum()),
        "prefix_reuse_ratio": prefix_reuse_ratio(table), "skipped_rows": table.skipped_rows,
        "max_concurrency": table.max_concurrency,
        "rate_bin_s": bin_s, "rate_series": (counts / bin_s).tolist(), "rate_edges_s": edges[:-1].tolist(),
    }
