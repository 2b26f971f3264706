"""Per-request and timeline tables from a RunLog (vectorised; no per-token storage).

Token times: a request's first token time is recorded; tokens 2..N are the end times of the
decode steps listed in its segments, so ITLs come from each instance's decode-step log.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..sim.cluster import RunLog

REQUEST_COLUMNS = [
    "request_id", "arrival_s", "input_len", "output_len", "cached_tokens", "prefill_instance",
    "decode_instance", "routed_s", "prefill_start_s", "prefill_end_s", "transfer_start_s",
    "transfer_end_s", "decode_alloc_s", "decode_admit_s", "first_token_s", "finish_s",
    "drop_reason", "preemptions", "recompute_tokens", "transfer_bytes", "kv_load_s", "loaded_tokens",
    "d_load_s", "recomputes",
]


def request_frame(log: RunLog) -> pd.DataFrame:
    names = [i.name for i in log.instances]
    rows = [(r.rid, r.arrival, r.input_len, r.output_len, r.cached_tokens,
             names[r.p_inst] if r.p_inst >= 0 else None, names[r.d_inst] if r.d_inst >= 0 else None,
             r.routed, r.prefill_start, r.prefill_end, r.transfer_start, r.transfer_end, r.d_alloc,
             r.decode_admit, r.first_token, r.finish, r.drop_reason, r.preemptions, r.recompute_tokens,
             r.transfer_bytes, r.kv_load_s, r.loaded_tokens, r.d_load_s, r.recomputes) for r in log.requests]
    df = pd.DataFrame.from_records(rows, columns=REQUEST_COLUMNS)
    df = df.sort_values("request_id", kind="stable").reset_index(drop=True)
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


def itl_samples(log: RunLog) -> tuple[np.ndarray, np.ndarray]:
    """(all ITLs in seconds, per-request max ITL in seconds; NaN for requests with < 2 tokens)."""
    n = len(log.requests)
    req_max = np.full(n, np.nan)
    chunks = []
    by_inst: dict[int, list[tuple[int, int, int, float]]] = {}
    for r in log.requests:
        if not r.segments or math.isnan(r.finish):
            continue
        prev = r.first_token
        for iid, a, b in r.segments:
            by_inst.setdefault(iid, []).append((r.rid, a, b, prev))
            prev = log.instances[iid].dstep_end[b]
    for iid, segs in by_inst.items():
        end = np.asarray(log.instances[iid].dstep_end)
        seg = np.asarray(segs, dtype=np.float64)
        rid, a, b, prev = seg[:, 0].astype(np.int64), seg[:, 1].astype(np.int64), seg[:, 2].astype(np.int64), seg[:, 3]
        head = end[a] - prev  # gap from the previous token to the segment's first decode token
        chunks.append(head)
        np.fmax.at(req_max, rid, head)
        lengths = b - a
        m = lengths > 0
        if m.any():
            d_end = np.diff(end, prepend=np.nan)
            L = lengths[m]
            starts = np.cumsum(L) - L
            idx = np.arange(L.sum()) - np.repeat(starts, L) + np.repeat(a[m] + 1, L)
            vals = d_end[idx]
            chunks.append(vals)
            seg_max = np.maximum.reduceat(vals, starts)
            np.fmax.at(req_max, rid[m], seg_max)
    allv = np.concatenate(chunks) if chunks else np.empty(0)
    return allv, req_max


def timeline_frame(log: RunLog) -> pd.DataFrame:
    """Long table: one row per engine step per instance, and per link-rate change."""
    parts = []
    for inst in log.instances:
        if not inst.log_t:
            continue
        cap = max(inst.pool.capacity, 1)
        parts.append(pd.DataFrame({
            "time_s": np.asarray(inst.log_t), "entity": inst.name, "kind": "instance", "role": inst.role,
            "step_s": np.asarray(inst.log_dur), "prefill_tokens": np.asarray(inst.log_pf, dtype=np.int64),
            "running_batch": np.asarray(inst.log_dec, dtype=np.int64),
            "queue_depth": np.asarray(inst.log_queue, dtype=np.int64),
            "kv_used_frac": np.asarray(inst.log_kv) / cap,
        }))
    for inst in log.instances:
        if inst.tier_log and inst.cache is not None:
            names = [t.name for t in inst.cache.tiers.tiers]
            caps = [t.capacity for t in inst.cache.tiers.tiers]
            t = np.asarray([x[0] for x in inst.tier_log])
            used = np.asarray([x[1] for x in inst.tier_log])
            for j, (name, cap) in enumerate(zip(names, caps)):
                parts.append(pd.DataFrame({"time_s": t, "entity": name, "kind": "tier", "role": "tier",
                                           "tier_used_bytes": used[:, j], "tier_used_frac": used[:, j] / cap}))
    if log.link_usage:
        lu = pd.DataFrame(log.link_usage, columns=["time_s", "entity", "link_bytes_per_s", "flows"])
        lu["kind"] = "link"
        lu["role"] = "link"
        lu["link_util"] = lu["link_bytes_per_s"] / lu["entity"].map(log.link_capacity)
        parts.append(lu)
    if not parts:
        return pd.DataFrame(columns=["time_s", "entity", "kind"])
    df = pd.concat(parts, ignore_index=True, sort=False)
    return df.sort_values(["time_s", "entity"], kind="stable").reset_index(drop=True)
