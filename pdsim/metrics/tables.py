"""Per-request and timeline tables from a RunRecord (vectorised; no per-token storage).

Token times: a request's first token time is recorded; tokens 2..N come from the record's
token times (decode-step ends for simulated runs, measured times for real ones).
"""
from __future__ import annotations

from typing import Iterator

import numpy as np
import pandas as pd

from ..sim.columns import column_part, column_rows
from ..sim.record import REQUEST_COLUMNS, STEP_COLUMNS, GapHistogram, RunRecord


def request_frame(rec: RunRecord) -> pd.DataFrame:
    """One row per request: its life's timestamps (s), assignments, derived latencies (s)."""
    cols = dict(rec.requests)
    names = np.array([i.name for i in rec.instances] + [None], dtype=object)
    for c in ("prefill_instance", "decode_instance"):
        idx = np.asarray(cols[c])
        cols[c] = names[np.where(idx >= 0, idx, len(names) - 1)]
    # the record's arrays, not copies (copy-on-write keeps the record as it is when the frame is changed)
    df = pd.DataFrame({c: cols[c] for c in REQUEST_COLUMNS}, copy=False)
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


def itl_histogram(rec: RunRecord) -> tuple[GapHistogram, np.ndarray]:
    """(every ITL of the finished requests as a GapHistogram (s), per-request max ITL in
    seconds; NaN for requests with < 2 tokens). Memory in engine steps, not tokens."""
    finished = pd.isna(rec.requests["drop_reason"]) & ~np.isnan(rec.requests["finish_s"])
    return rec.tokens.itl_histogram(rec.requests["first_token_s"], np.asarray(finished, dtype=bool))


def itl_samples(rec: RunRecord) -> tuple[np.ndarray, np.ndarray]:
    """(all ITLs in seconds, one float per gap; per-request max ITL in seconds)."""
    h, req_max = itl_histogram(rec)
    return h.expand(), req_max


# the timeline table's columns; a row fills the ones of its kind (instance step, tier change,
# link-rate change), the others are NaN
TIMELINE_COLUMNS = ("time_s", "entity", "kind", "role", "step_s", "prefill_tokens", "running_batch", "queue_depth",
                    "kv_used_frac", "tier_used_bytes", "tier_used_frac", "link_bytes_per_s", "flows", "link_util")
_TEXT = ("entity", "kind", "role")


def _part(n: int, **cols) -> pd.DataFrame:
    out = {}
    for c in TIMELINE_COLUMNS:
        v = cols.get(c)
        if c in _TEXT:
            out[c] = pd.Series(np.full(n, v, dtype=object) if isinstance(v, str) or v is None else v, dtype=object)
        else:
            out[c] = np.full(n, np.nan) if v is None else np.asarray(v, dtype=np.float64)
    return pd.DataFrame(out)


def timeline_parts(rec: RunRecord, max_rows: int = 1 << 20) -> Iterator[pd.DataFrame]:
    """The timeline as frames of at most ``max_rows`` rows with the same columns
    (TIMELINE_COLUMNS): each instance's steps, then each tier's changes, then the links'
    rate changes, each in time order. Writing them one at a time keeps a long run's timeline
    out of memory."""
    for inst, steps in zip(rec.instances, rec.steps):
        n = column_rows(steps)
        cap = max(inst.kv_capacity_pages, 1)
        for lo in range(0, n, max_rows):
            hi = min(lo + max_rows, n)

            def col(c: str, lo=lo, hi=hi) -> np.ndarray:
                return column_part(steps, c, lo, hi)  # a spilled log is read a part at a time

            yield _part(hi - lo, time_s=col("time_s"), entity=inst.name, kind="instance",
                        role=inst.role, step_s=col("step_s"), prefill_tokens=col("prefill_tokens"),
                        running_batch=col("running_batch"), queue_depth=col("queue_depth"),
                        kv_used_frac=col("kv_used") / cap)
    for name, cap, t, used in rec.tier_usage:
        for lo in range(0, len(t), max_rows):
            sl = slice(lo, min(lo + max_rows, len(t)))
            yield _part(sl.stop - sl.start, time_s=t[sl], entity=name, kind="tier", role="tier",
                        tier_used_bytes=used[sl], tier_used_frac=used[sl] / cap)
    lu = rec.link_usage
    n = column_rows(lu) if lu else 0
    if n:
        names = np.asarray(rec.link_names, dtype=object)
        caps = np.asarray([rec.link_capacity.get(k, np.nan) for k in rec.link_names], dtype=np.float64)
        for lo in range(0, n, max_rows):
            hi = min(lo + max_rows, n)
            # each part read alone (a spilled log is never read whole per part)
            code = column_part(lu, "link", lo, hi)
            rate = column_part(lu, "bytes_per_s", lo, hi)
            yield _part(hi - lo, time_s=column_part(lu, "time_s", lo, hi), entity=names[code], kind="link",
                        role="link", link_bytes_per_s=rate, flows=column_part(lu, "flows", lo, hi),
                        link_util=rate / caps[code])


def timeline_frame(rec: RunRecord) -> pd.DataFrame:
    """Long table: one row per engine step per instance, per tier change and per link-rate
    change, sorted by time then entity (in memory: for large runs write timeline_parts)."""
    parts = list(timeline_parts(rec))
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype=object if c in _TEXT else np.float64) for c in TIMELINE_COLUMNS})
    df = pd.concat(parts, ignore_index=True, sort=False)
    return df.sort_values(["time_s", "entity"], kind="stable").reset_index(drop=True)


__all__ = ["request_frame", "itl_histogram", "itl_samples", "timeline_frame", "timeline_parts", "TIMELINE_COLUMNS",
           "STEP_COLUMNS"]
