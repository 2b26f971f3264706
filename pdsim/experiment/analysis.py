"""From per-run rows to the experiment's tables: means with confidence intervals, paired
differences against the baseline with their tests, and latency quantiles for the CDFs.

Cells are (deployment, workload, policy); replicates are the seeds. Only runs that finished
(``status == ok``) count; a replicate missing on either side of a pair leaves that pair out
(the test says on how many pairs it stands, ``n``).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .evaluate import LATENCIES, QUANTILES
from .stats import holm, mean_ci, paired

CELL = ["deployment", "workload", "policy"]


def _ok(runs: pd.DataFrame) -> pd.DataFrame:
    return runs[runs["status"] == "ok"]


def summary_table(runs: pd.DataFrame, metrics, confidence: float) -> pd.DataFrame:
    """One row per (deployment, workload, policy, metric): n, mean, std, ci_low, ci_high."""
    out = []
    ok = _ok(runs)
    for (dep, wl, pol), g in ok.groupby(CELL, sort=False):
        load = g["load"].iloc[0] if "load" in g else None
        for m in metrics:
            ci = mean_ci(pd.to_numeric(g[m], errors="coerce").to_numpy(dtype=float) if m in g else [], confidence)
            out.append({"deployment": dep, "workload": wl, "load": load, "policy": pol, "metric": m, "n": ci.n,
                        "mean": ci.mean, "std": ci.std, "ci_low": ci.low, "ci_high": ci.high})
    return pd.DataFrame(out, columns=["deployment", "workload", "load", "policy", "metric", "n", "mean", "std",
                                      "ci_low", "ci_high"])


def paired_table(runs: pd.DataFrame, metrics, baseline: str, confidence: float) -> pd.DataFrame:
    """Each non-baseline policy against ``baseline``, per (deployment, workload, metric):
    mean paired difference (policy - baseline) with its interval, relative difference (to
    the baseline's mean), t, p, and Holm's adjustment over the policies of that family."""
    rows = []
    ok = _ok(runs)
    for (dep, wl), g in ok.groupby(["deployment", "workload"], sort=False):
        base = g[g["policy"] == baseline].set_index("replicate")
        for m in metrics:
            if m not in g:
                continue
            family = []
            for pol, gp in g[g["policy"] != baseline].groupby("policy", sort=False):
                x = gp.set_index("replicate")
                common = x.index.intersection(base.index)
                xv = pd.to_numeric(x.loc[common, m], errors="coerce").to_numpy(dtype=float)
                yv = pd.to_numeric(base.loc[common, m], errors="coerce").to_numpy(dtype=float)
                t = paired(xv, yv, confidence)
                ref = float(np.nanmean(yv)) if len(yv) and np.isfinite(yv).any() else np.nan
                rel = t.mean_diff / ref if ref and np.isfinite(ref) else np.nan
                family.append({"deployment": dep, "workload": wl, "policy": pol, "baseline": baseline, "metric": m,
                               "n": t.n, "baseline_mean": ref, "mean_diff": t.mean_diff, "ci_low": t.low,
                               "ci_high": t.high, "rel_diff": rel, "t": t.t, "p_value": t.p_value})
            for row, adj in zip(family, holm([r["p_value"] for r in family])):
                row["p_holm"] = adj
                row["significant"] = bool(np.isfinite(adj) and adj < 1.0 - confidence)
            rows.extend(family)
    cols = ["deployment", "workload", "policy", "baseline", "metric", "n", "baseline_mean", "mean_diff", "ci_low",
            "ci_high", "rel_diff", "t", "p_value", "p_holm", "significant"]
    return pd.DataFrame(rows, columns=cols)


def quantile_table(runs: pd.DataFrame, rows: list[dict]) -> pd.DataFrame:
    """Long table of every run's latency quantiles: deployment, workload, policy, replicate,
    latency, q, value (seconds)."""
    parts = []
    for (_, r), row in zip(runs.iterrows(), rows):
        qs = row.get("quantiles") if row.get("status") == "ok" else None
        for lat in LATENCIES:
            v = (qs or {}).get(lat)
            if v is None:
                continue
            parts.append(pd.DataFrame({"deployment": r["deployment"], "workload": r["workload"], "policy": r["policy"],
                                       "replicate": r["replicate"], "latency": lat, "q": QUANTILES, "value": v}))
    if not parts:
        return pd.DataFrame(columns=["deployment", "workload", "policy", "replicate", "latency", "q", "value"])
    return pd.concat(parts, ignore_index=True)


def mean_quantiles(qt: pd.DataFrame, confidence: float) -> pd.DataFrame:
    """Per (deployment, workload, policy, latency, q): the replicates' mean quantile and its
    interval (the average of quantile functions: each replicate weighs the same)."""
    out = []
    for key, g in qt.groupby(["deployment", "workload", "policy", "latency", "q"], sort=False):
        ci = mean_ci(g["value"].to_numpy(dtype=float), confidence)
        out.append((*key, ci.mean, ci.low, ci.high))
    return pd.DataFrame(out, columns=["deployment", "workload", "policy", "latency", "q", "value", "low", "high"])
