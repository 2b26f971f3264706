"""Which configurations compete: those that meet the SLO, compared only on the same workload.

A Pareto frontier or a "best configuration" that mixes offered loads is meaningless (a
deployment at 100 req/s shows more goodput than the same one at 40 req/s), and one that admits
configurations missing the SLO recommends deployments nobody could run (AIConfigurator, too,
filters by SLO first). So:

- ``meets_slo``: simulated (status ok) and meeting the sweep's target (SearchSpec.target():
  goodput share and percentile limits, as ``search.meets_target`` judges a max-rate probe);
- ``workload_group``: the values of every swept ``workload.*`` field (offered rate, lengths,
  concurrency...), e.g. ``workload.rate=40``; empty when the sweep varies none;
- frontiers (``pareto``, ``pareto_goodput_ttft``) and the best configuration per objective are
  computed within each group, among configurations that meet the SLO.
In a max-rate sweep every row is measured at its own highest sustainable rate (``max_rate``):
that is the comparison the search is for, and the reports say so.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from .pareto import GOODPUT_TTFT, THROUGHPUT_USER, pareto_mask
from .search import meets_target

FRONTIERS = {"pareto": THROUGHPUT_USER, "pareto_goodput_ttft": GOODPUT_TTFT}


def workload_fields(axes: list[list[str]] | list[dict]) -> list[str]:
    """The swept fields that change the workload (``workload.*``), in axis order."""
    out = []
    for ax in axes:
        fields = ax["fields"] if isinstance(ax, dict) else ax
        out += [f for f in fields if f.startswith("workload.")]
    return out


def _value(v: Any) -> str:
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return f"{v:g}" if isinstance(v, float) else str(v)


def group_labels(df: pd.DataFrame, fields: list[str]) -> pd.Series:
    """``field=value, ...`` of each row's workload knobs ('' when the sweep varies none)."""
    fields = [f for f in fields if f in df]
    if not fields:
        return pd.Series([""] * len(df), index=df.index, dtype=object)
    return df[fields].apply(lambda r: ", ".join(f"{f}={_value(r[f])}" for f in fields), axis=1).astype(object)


def slo_mask(df: pd.DataFrame, target: dict) -> np.ndarray:
    """True for simulated rows meeting ``target`` (see the module doc)."""
    ok = (df["status"] == "ok").to_numpy()
    rows = df.to_dict("records")
    return np.array([bool(o) and meets_target(r, target) for o, r in zip(ok, rows)], dtype=bool)


def mark(df: pd.DataFrame, workload: list[str], target: dict) -> pd.DataFrame:
    """Add ``meets_slo``, ``workload_group`` and the frontier flags (per group, SLO-meeting rows only)."""
    df = df.copy()
    df["meets_slo"] = slo_mask(df, target) if len(df) else np.zeros(0, dtype=bool)
    df["workload_group"] = group_labels(df, workload)
    for col, (x, y, mx) in FRONTIERS.items():
        flag = np.zeros(len(df), dtype=bool)
        for _g, idx in df[df["meets_slo"]].groupby("workload_group", sort=False).groups.items():
            pos = df.index.get_indexer(idx)
            pts = df.loc[idx, [x, y]].apply(pd.to_numeric, errors="coerce").to_numpy(dtype=float)
            flag[pos] = pareto_mask(pts, list(mx))
        df[col] = flag
    return df


def frontier_table(df: pd.DataFrame, col: str = "pareto") -> pd.DataFrame:
    """The rows on a frontier, by workload group then its x metric."""
    x = FRONTIERS[col][0]
    fr = df[df[col]] if col in df else df.iloc[0:0]
    keys = ["workload_group", x] if "workload_group" in fr else [x]
    return fr.sort_values(keys, kind="stable")


def _py(v: Any) -> Any:
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and v != v:
        return None
    return v


TIE_REL = 1e-3  # objective values within 0.1% of the best are a tie
TIE_BREAK = "fewest GPUs, then lowest p90 TTFT"


def pick(cand: pd.DataFrame, metric: str, goal: str) -> tuple[Any, int]:
    """(index of the best row, how many rows tie for best) on ``metric``: rows within
    ``TIE_REL`` of the best value tie; among them the fewest GPUs wins, then the lowest p90
    TTFT, then plan order (the second objectives a deployment is chosen by: cost, then latency)."""
    col = pd.to_numeric(cand[metric])
    best = col.max() if goal == "max" else col.min()
    tol = TIE_REL * abs(best)
    tied = cand[(col - best).abs() <= tol]
    if len(tied) == 1:
        return tied.index[0], 1
    keys = pd.DataFrame({"gpus": pd.to_numeric(tied["gpus"], errors="coerce") if "gpus" in tied else 0.0,
                         "ttft": pd.to_numeric(tied["p90_ttft_ms"], errors="coerce") if "p90_ttft_ms" in tied
                         else 0.0, "order": range(len(tied))}, index=tied.index)
    keys = keys.fillna(float("inf"))
    return keys.sort_values(["gpus", "ttft", "order"], kind="stable").index[0], len(tied)


def best_per_objective(df: pd.DataFrame, objectives, knobs: list[str]) -> dict[str, dict]:
    """The best configuration per objective and workload group, among those meeting the SLO
    (and an objective's own ``min_goodput_share``). Keys: the objective's label, followed by
    ``[group]`` when the sweep has several workload groups."""
    out: dict[str, dict] = {}
    ok = df[df["meets_slo"]] if "meets_slo" in df else df[df["status"] == "ok"]
    groups = list(dict.fromkeys(df["workload_group"])) if "workload_group" in df else [""]
    for obj in objectives:
        if obj.metric not in ok:
            continue
        for g in groups:
            cand = ok[ok["workload_group"] == g] if "workload_group" in ok else ok
            if obj.min_goodput_share is not None:
                cand = cand[cand["goodput_share"] >= obj.min_goodput_share]
            cand = cand[pd.to_numeric(cand[obj.metric], errors="coerce").notna()]
            if cand.empty:
                continue
            idx, tied = pick(cand, obj.metric, obj.goal)
            r = df.loc[idx]
            label = obj.label + (f" [{g}]" if len(groups) > 1 else "")
            out[label] = {"metric": obj.metric, "goal": obj.goal, "min_goodput_share": obj.min_goodput_share,
                          "workload": g or None, "value": _py(r[obj.metric]), "config_id": r["config_id"],
                          "layout": _py(r["layout"]), "gpus": _py(r["gpus"]),
                          "knobs": {k: _py(r[k]) for k in knobs}, "config": f"configs/{r['config_id']}.yaml",
                          "tied": tied, "tie_break": TIE_BREAK if tied > 1 else None}
    return out
