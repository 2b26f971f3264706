"""Per-request and timeline tables from a RunRecord (vectorised; no per-token storage).

Token times: a request's first token time is recorded; tokens 2..N come from the record's
token times (decode-step ends for simulated runs, measured times for real ones).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..sim.record import REQUEST_COLUMNS, STEP_COLUMNS, RunRecord


def request_frame(rec: RunRecord) -> pd.DataFrame:
    """One row per request: its life's timestamps (s), assignments, derived latencies (s)."""
    cols = dict(rec.requests)
    names = np.array([i.name for i in rec.instances] + [None], dtype=object)
    for c in ("prefill_instance", "decode_instance"):
        idx = np.asarray(cols[c])
        cols[c] = names[np.where(idx >= 0, idx, len(names) - 1)]
    df = pd.DataFrame({c: cols[c] for c in REQUEST_COLUMNS})
    extra = [c for c in rec.requests if c not in REQUEST_COLUMNS]
    for c in extra:  # real runs add e.g. http_status, error, output_tokens
        df[c] = rec.requests[c]
    df["ttft_s"] = df["first_token_s"] - df["arrival_s"]
    df["e2e_s"] = df["finish_s"] - df["arrival_s"]
    many = df["output_len"] > 1
    df["tpot_s"] = np.where(many, (df["finish_s"] - df["first_token_s"]) / (df["output_len"] - 1).clip(lower=1), np.nan)
    # TTFT breakdown: queueing before prefill, prefill compute, waiting for D + transfer, D admission
    df["queue_s"] = df["prefill_start_s"] - df["arrival_s"]
    # prefill compute excludes the synchronous KV load from offload tiers (its own phase)
    df["prefill_s"] = df["prefill_end_s"] - df["prefill_start_s"] - df["kv_load_s"]
    df["transfer_wait_s"] = df["transfer_start_s"] - df["prefill_end_s"]
    df["transfer_s"] = df["transfer_end_s"] - df["transfer_start_s"]
    df["decode_wait_s"] = df["first_token_s"] - df["transfer_end_s"]
    df["finished"] = df["drop_reason"].isna()
    return df


def itl_samples(rec: RunRecord) -> tuple[np.ndarray, np.ndarray]:
    """(all ITLs in seconds, per-request max ITL in seconds; NaN for requests with < 2 tokens)."""
    finished = pd.isna(rec.requests["drop_reason"]) & ~np.isnan(rec.requests["finish_s"])
    return rec.tokens.itl_samples(rec.requests["first_token_s"], np.asarray(finished, dtype=bool))


def timeline_frame(rec: RunRecord) -> pd.DataFrame:
    """Long table: one row per engine step per instance, per tier change and per link-rate change."""
    parts = []
    for inst, steps in zip(rec.instances, rec.steps):
        if not len(steps.get("time_s", ())):
            continue
        cap = max(inst.kv_capacity_pages, 1)
        parts.append(pd.DataFrame({
            "time_s": steps["time_s"], "entity": inst.name, "kind": "instance", "role": inst.role,
            "step_s": steps["step_s"], "prefill_tokens": steps["prefill_tokens"].astype(np.int64),
            "running_batch": steps["running_batch"].astype(np.int64),
            "queue_depth": steps["queue_depth"].astype(np.int64),
            "kv_used_frac": steps["kv_used"] / cap,
        }))
    for name, cap, t, used in rec.tier_usage:
        parts.append(pd.DataFrame({"time_s": t, "entity": name, "kind": "tier", "role": "tier",
                                   "tier_used_bytes": used, "tier_used_frac": used / cap}))
    lu = rec.link_usage
    if lu and len(lu["time_s"]):
        names = np.asarray(rec.link_names, dtype=object)
        df = pd.DataFrame({"time_s": lu["time_s"], "entity": names[lu["link"]],
                           "link_bytes_per_s": lu["bytes_per_s"], "flows": lu["flows"]})
        df["kind"] = "link"
        df["role"] = "link"
        df["link_util"] = df["link_bytes_per_s"] / df["entity"].map(rec.link_capacity)
        parts.append(df)
    if not parts:
        return pd.DataFrame(columns=["time_s", "entity", "kind"])
    df = pd.concat(parts, ignore_index=True, sort=False)
    return df.sort_values(["time_s", "entity"], kind="stable").reset_index(drop=True)


__all__ = ["request_frame", "itl_samples", "timeline_frame", "STEP_COLUMNS"]
