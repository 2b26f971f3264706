"""Fit of the decode attention's KV read rates, from the cache and from DRAM, against the step's
working set (the price: costs/compute.py ``dram_share``, costs/roofline.py).

A decode step reads every layer's KV of every sequence once, layer after layer, and the next
step reads the same bytes again in the same order. Under an LRU-like last-level cache such a
cyclic sweep is all hits while the step's working set (its KV plus the weights it streams)
fits the cache, and nearly all misses once it does not: the KV then comes from DRAM. The rows
(``calibration/microbench/kv_residency.py``) time the engine's decode attention kernel over
``layers`` distinct KV caches in turn, as the engine's layers run, at growing working sets; the
per-token time is two levels with a cliff between them.

The fit is a change point: the split of the rows (sorted by working set) into a low and a high
level that leaves the least squared error of log time per token, each level the median of its
side. ``cache_bytes`` is the geometric midpoint of the two working sets either side of the
split (``cache_bytes_lo`` / ``_hi``: those two), ``cache_gbps`` / ``dram_gbps`` the KV bytes per
token over the two levels' times. A sweep with no level change (the largest working set still
as fast as the smallest, within ``MIN_STEP``) gives ``cache_bytes`` 0: one rate throughout.
"""
from __future__ import annotations

import math
from statistics import median

#: the high level must be at least this many times the low one to be a cliff, not noise
MIN_STEP = 1.3


def fit_kv_residency(rows: list[dict]) -> dict | None:
    """``rows``: dicts with ``working_set_bytes``, ``kv_bytes_per_token`` (per layer) and
    ``ns_per_token`` (per layer). Returns the calibration block, or None with fewer than 3 rows."""
    pts = sorted((float(r["working_set_bytes"]), float(r["ns_per_token"]), float(r["kv_bytes_per_token"]))
                 for r in rows if float(r["ns_per_token"]) > 0)
    if len(pts) < 3:
        return None
    kv_tok = pts[0][2]
    logs = [math.log(p[1]) for p in pts]
    best = None
    for i in range(1, len(pts)):  # rows [:i] resident, [i:] from DRAM
        lo, hi = median(logs[:i]), median(logs[i:])
        sse = sum((x - lo) ** 2 for x in logs[:i]) + sum((x - hi) ** 2 for x in logs[i:])
        if best is None or sse < best[0]:
            best = (sse, i, lo, hi)
    _sse, i, lo, hi = best
    all_level = math.exp(median(logs))
    if math.exp(hi - lo) < MIN_STEP:  # no cliff within the sweep: one rate, the cache never matters
        rate = kv_tok / all_level
        return {"cache_bytes": 0.0, "cache_gbps": round(rate, 4), "dram_gbps": round(rate, 4),
                "points": float(len(pts)), "fit_mape": _mape(pts, 0.0, all_level, all_level),
                "note": f"no level change up to {pts[-1][0] / 2**20:.0f} MiB (high/low < {MIN_STEP})"}
    w_lo, w_hi = pts[i - 1][0], pts[i][0]
    cache = math.sqrt(w_lo * w_hi)
    t_hot, t_cold = math.exp(lo), math.exp(hi)
    return {"cache_bytes": float(round(cache)), "cache_gbps": round(kv_tok / t_hot, 4),
            "dram_gbps": round(kv_tok / t_cold, 4),
            "cache_bytes_lo": float(round(w_lo)), "cache_bytes_hi": float(round(w_hi)),
            "points": float(len(pts)), "fit_mape": _mape(pts, cache, t_hot, t_cold)}


def _mape(pts, cache: float, t_hot: float, t_cold: float) -> float:
    err = [abs((t_hot if w <= cache else t_cold) - t) / t for w, t, _ in pts]
    return round(sum(err) / len(err), 6)
