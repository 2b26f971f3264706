"""Pareto frontiers over sweep results."""
from __future__ import annotations

import numpy as np
import pandas as pd


def pareto_mask(points: np.ndarray, maximize: list[bool]) -> np.ndarray:
    """True for rows of ``points`` (n x k) that no other row dominates: at least as good in
    every objective and strictly better in one. NaN rows are never on the frontier."""
    p = np.asarray(points, dtype=float)
    signs = np.where(maximize, 1.0, -1.0)
    q = p * signs  # everything maximised
    ok = ~np.isnan(q).any(axis=1)
    mask = np.zeros(len(q), dtype=bool)
    idx = np.flatnonzero(ok)
    for i in idx:
        others = q[idx]
        dominated = ((others >= q[i]).all(axis=1) & (others > q[i]).any(axis=1)).any()
        mask[i] = not dominated
    return mask


def frontier(df: pd.DataFrame, x: str, y: str, maximize: tuple[bool, bool] = (True, True)) -> pd.DataFrame:
    """The non-dominated rows of ``df`` in (x, y), sorted by x."""
    if df.empty:
        return df
    m = pareto_mask(df[[x, y]].to_numpy(dtype=float), list(maximize))
    return df[m].sort_values(x)
