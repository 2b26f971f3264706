"""The real run's own sampling spread: how far each metric could move on another run of the same
requests' kind and number, with the engine and the host exactly as they were.

A bootstrap over requests (Efron and Tibshirani, *An Introduction to the Bootstrap*, 1993, ch. 13
for percentile intervals): draw the run's finished requests with replacement, as many as it had,
and recompute every metric; the interval is the 5th to 95th percentile of the draws. The request
is the unit drawn because its gaps are not independent (a request's ITL gaps share its batch and
its prefill neighbours): drawing gaps one by one would make the ITL intervals far too narrow.

What it covers and what it does not. It says whether a run is long enough to check a metric
to a tolerance: a p90 that falls between a mode of ~8 ms decode gaps and a mode of ~800 ms gaps
behind prefill chunks (10% of the gaps) moves by 100x when the share of long gaps moves by one
point, and then no model can be checked against it to ±20%. It does not cover the host's drift
between two server lifetimes (docs/validation.md: the repeated cases), which comes on top.
"""
from __future__ import annotations

import numpy as np

from ..metrics.results import Results
from ..sim.record import ExplicitTokens

LEVEL = 0.90  # the interval's coverage
DRAWS = 400  # bootstrap draws: the 5th/95th percentiles settle to ~2% of their width by then
STATS = ("mean", "median", "p90", "p99")
_COLUMNS = {"ttft": "ttft_s", "tpot": "tpot_s", "e2e_latency": "e2e_s"}


def weighted_stats(values: np.ndarray, counts: np.ndarray) -> tuple[float, float, float, float]:
    """(mean, median, p90, p99) of ``values`` (sorted ascending) each repeated ``counts`` times,
    exactly as numpy's linear-interpolation percentiles of the repeated array, without building it."""
    cum = np.cumsum(counts)
    total = int(cum[-1])
    mean = float(counts @ values / total)
    out = [mean]
    for q in (50.0, 90.0, 99.0):
        pos = q / 100 * (total - 1)
        k = int(pos)
        lo, hi = np.searchsorted(cum, [k, min(k + 1, total - 1)], side="right")
        out.append(float(values[lo] + (pos - k) * (values[hi] - values[lo])))
    return out[0], out[1], out[2], out[3]


def sampling_intervals(real: Results, draws: int = DRAWS, level: float = LEVEL,
                       seed: int = 0) -> dict[str, tuple[float, float]]:
    """``{metric: (low, high)}`` in ms, for ``{mean,median,p90,p99}_{ttft,tpot,e2e_latency,itl}_ms``:
    the ``level`` bootstrap percentile interval of each metric over the run's finished requests
    (the same seed gives the same intervals). ITL metrics only where the run kept every token's
    time (a recording, ``pdsim replay`` or bench_serving's per-request ``itls``); a family is
    left out when fewer than two requests have a value. Memory: one draw at a time, O(gaps)."""
    df = real.requests
    fin = df["finished"].to_numpy(dtype=bool)
    idx = np.flatnonzero(fin)
    n = idx.size
    if n < 2:
        return {}
    # (sorted values, the finished request each belongs to) per family
    families: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    pos = np.full(len(fin), -1)
    pos[idx] = np.arange(n)
    for fam, col in _COLUMNS.items():
        v = df[col].to_numpy(dtype=float)[idx]
        ok = np.flatnonzero(np.isfinite(v))
        if ok.size >= 2:
            o = np.argsort(v[ok], kind="stable")
            families[fam] = (v[ok][o], ok[o])
    tokens = real.record.tokens
    if isinstance(tokens, ExplicitTokens):
        # as the ITL statistics count them (metrics/tables.py): finished with a finish time
        gaps, owner = tokens.itl_owned(fin & np.isfinite(df["finish_s"].to_numpy(dtype=float)))
        if np.unique(owner).size >= 2:
            o = np.argsort(gaps, kind="stable")
            families["itl"] = (gaps[o], pos[owner[o]])  # a gap is drawn as often as its request
    rng = np.random.default_rng(seed)
    got: dict[str, list[tuple]] = {fam: [] for fam in families}
    for _ in range(draws):
        w = rng.multinomial(n, np.full(n, 1.0 / n))  # how often each finished request was drawn
        for fam, (vals, who) in families.items():
            c = w[who]
            if c.any():
                got[fam].append(weighted_stats(vals, c))
    lo, hi = 50 * (1 - level), 50 * (1 + level)
    out = {}
    for fam, rows in got.items():
        if rows:
            a = np.asarray(rows) * 1e3
            for j, stat in enumerate(STATS):
                out[f"{stat}_{fam}_ms"] = (float(np.percentile(a[:, j], lo)), float(np.percentile(a[:, j], hi)))
    return out


def within(value: float | None, interval: tuple[float, float] | None) -> bool:
    """Whether ``value`` lies inside ``interval`` (both ends included)."""
    return value is not None and interval is not None and interval[0] <= value <= interval[1]
