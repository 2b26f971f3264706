"""Pareto frontiers over sweep results.

A point is on the frontier when no other point dominates it: at least as good in every
objective and strictly better in one. Equal points do not dominate each other, so duplicates of
a frontier point are all on it. Rows with a missing (NaN) objective are never on it.

The sweep reports two: output tokens/s per GPU vs tokens/s per user (1000 / mean TPOT ms),
both maximised (cost against interactivity), and request goodput (max) vs p90 TTFT (min), each
among the configurations that meet the SLO and per workload group (select.py decides which).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

THROUGHPUT_USER = ("output_throughput_per_gpu", "tokens_per_s_per_user", (True, True))
GOODPUT_TTFT = ("request_goodput", "p90_ttft_ms", (True, False))


def pareto_mask(points: np.ndarray, maximize: list[bool] | tuple[bool, ...], chunk: int = 1024) -> np.ndarray:
    """True for rows of ``points`` (n x k) that no other row dominates."""
    p = np.asarray(points, dtype=float)
    if p.ndim != 2 or len(p) == 0:
        return np.zeros(len(p), dtype=bool)
    q = p * np.where(np.asarray(maximize, dtype=bool), 1.0, -1.0)  # everything maximised
    ok = ~np.isnan(q).any(axis=1)
    idx = np.flatnonzero(ok)
    cand = q[idx]
    mask = np.zeros(len(q), dtype=bool)
    for s in range(0, len(idx), chunk):
        block = cand[s:s + chunk]  # b x k; compare with all candidates (n x k)
        ge = (cand[None, :, :] >= block[:, None, :]).all(axis=2)
        gt = (cand[None, :, :] > block[:, None, :]).any(axis=2)
        mask[idx[s:s + chunk]] = ~(ge & gt).any(axis=1)
    return mask


def frontier(df: pd.DataFrame, x: str, y: str, maximize: tuple[bool, bool] = (True, True)) -> pd.DataFrame:
    """The non-dominated rows of ``df`` in (x, y), sorted by x."""
    if df.empty or x not in df or y not in df:
        return df.iloc[0:0]
    pts = df[[x, y]].apply(pd.to_numeric, errors="coerce").to_numpy(dtype=float)
    return df[pareto_mask(pts, list(maximize))].sort_values(x, kind="stable")
