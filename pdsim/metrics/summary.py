"""Summary metrics with SGLang ``bench_serving`` field names, plus goodput under the SLO.

Definitions (DOMAIN.md s1): TTFT = first token - arrival; ITL = every gap between consecutive
tokens (percentiles over all gaps of all requests, as bench_serving); TPOT = (t_last - t_first)
/ (N - 1) per request; E2E = t_last - arrival. Throughputs divide by the benchmark duration
(first arrival to last finish). Goodput: requests meeting every SLO bound (vLLM --goodput);
``slo_failures`` says how many requests miss each term (SLOSpec documents the terms; the
worst-gap term ``max_itl_ms`` is opt-in).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..sim.record import GapHistogram


def _stats(prefix: str, values_s, out: dict) -> None:
    """mean/median/std/p90/p99 in ms of ``values_s`` (seconds: an array, or a GapHistogram of
    value/count pairs, whose statistics equal the expanded array's)."""
    if isinstance(values_s, GapHistogram):
        h = values_s.finite()
        if h.n == 0:
            for k in ("mean", "median", "std", "p90", "p99"):
                out[f"{k}_{prefix}_ms"] = None
            return
        out[f"mean_{prefix}_ms"] = h.mean() * 1e3
        out[f"median_{prefix}_ms"] = h.percentile(50) * 1e3
        out[f"std_{prefix}_ms"] = h.std() * 1e3
        out[f"p90_{prefix}_ms"] = h.percentile(90) * 1e3
        out[f"p99_{prefix}_ms"] = h.percentile(99) * 1e3
        return
    v = np.asarray(values_s, dtype=np.float64)
    v = v[~np.isnan(v)] * 1e3
    if v.size == 0:
        for k in ("mean", "median", "std", "p90", "p99"):
            out[f"{k}_{prefix}_ms"] = None
        return
    out[f"mean_{prefix}_ms"] = float(v.mean())
    out[f"median_{prefix}_ms"] = float(np.median(v))
    out[f"std_{prefix}_ms"] = float(v.std())
    out[f"p90_{prefix}_ms"] = float(np.percentile(v, 90))
    out[f"p99_{prefix}_ms"] = float(np.percentile(v, 99))


# SLO terms in report order: (short name used in summary["slo_failures"] and the request
# columns ``slo_fail_<name>``, SLOSpec field, label)
SLO_TERMS = (("ttft", "ttft_ms", "TTFT"), ("tpot", "tpot_ms", "TPOT"), ("itl", "itl_ms", "mean ITL"),
             ("max_itl", "max_itl_ms", "worst ITL"), ("e2e", "e2e_ms", "E2E"))


def slo_term_failures(df: pd.DataFrame, itl_max_s: np.ndarray, slo) -> dict[str, np.ndarray]:
    """For each SLO term that has a bound: True where a *finished* request misses it.

    ``slo`` has the SLOSpec bounds in ms as attributes (None = not checked); ``itl_max_s`` is
    each request's worst inter-token gap (s). ``itl`` bounds the request's mean gap, which is
    its TPOT; ``max_itl`` (opt-in) its worst gap. Requests without a gap (one output token)
    pass the gap terms. Unfinished requests are not counted here: they fail every term."""
    fin = df["finished"].to_numpy()
    ttft = df["ttft_s"].to_numpy() * 1e3
    tpot = df["tpot_s"].to_numpy() * 1e3
    worst = np.asarray(itl_max_s, dtype=float) * 1e3
    e2e = df["e2e_s"].to_numpy() * 1e3
    values = {"ttft": ttft, "tpot": tpot, "itl": tpot, "max_itl": worst, "e2e": e2e}
    out = {}
    for name, field, _label in SLO_TERMS:
        bound = getattr(slo, field, None)
        if bound is None:
            continue
        v = values[name]
        with np.errstate(invalid="ignore"):
            out[name] = fin & ~np.isnan(v) & (v > bound)
    return out


def meets_slo(df: pd.DataFrame, itl_max_s: np.ndarray, slo) -> np.ndarray:
    """Whether each request finished and meets every SLO bound (vLLM ``--goodput``).

    Also records which term each request missed: a boolean column ``slo_fail_<term>`` per SLO
    term with a bound is added to ``df`` (the request table), which ``summarize`` counts."""
    ok = df["finished"].to_numpy().copy()
    for name, failed in slo_term_failures(df, itl_max_s, slo).items():
        df[f"slo_fail_{name}"] = failed
        ok &= ~failed
    return ok


def slo_failures(df: pd.DataFrame) -> dict[str, int]:
    """Requests missing each SLO term (``slo_fail_<term>`` columns, see meets_slo) and the
    requests that did not finish (they miss every term); a request can miss several terms."""
    out = {name: int(df[f"slo_fail_{name}"].sum()) for name, _f, _l in SLO_TERMS if f"slo_fail_{name}" in df}
    out["dropped"] = int((~df["finished"]).sum())
    return out


# the request columns the summary reads of finished requests (copied once, not the whole table)
_FINISHED_COLUMNS = ("finish_s", "input_len", "output_len", "ttft_s", "tpot_s", "e2e_s", "queue_s", "prefill_s",
                     "transfer_s", "kv_load_s")


def summarize(df: pd.DataFrame, itls, ok: np.ndarray, nodes: float, gpus: int) -> dict:
    """``itls``: every inter-token gap (s), an array or a GapHistogram."""
    fin = df.loc[df["finished"].to_numpy(), [c for c in _FINISHED_COLUMNS if c in df.columns]]
    out: dict = {}
    start = float(df["arrival_s"].min()) if len(df) else 0.0
    end = float(fin["finish_s"].max()) if len(fin) else start
    duration = max(end - start, 1e-9)
    out["duration"] = duration
    out["completed"] = int(len(fin))
    out["dropped"] = int((~df["finished"]).sum())
    out["total_input_tokens"] = int(fin["input_len"].sum())
    out["total_output_tokens"] = int(fin["output_len"].sum())
    out["request_throughput"] = len(fin) / duration
    out["input_throughput"] = out["total_input_tokens"] / duration
    out["output_throughput"] = out["total_output_tokens"] / duration
    out["total_throughput"] = out["input_throughput"] + out["output_throughput"]
    out["input_throughput_per_node"] = out["input_throughput"] / nodes
    out["output_throughput_per_node"] = out["output_throughput"] / nodes
    out["output_throughput_per_gpu"] = out["output_throughput"] / gpus
    _stats("ttft", fin["ttft_s"].to_numpy(), out)
    _stats("itl", itls, out)
    _stats("tpot", fin["tpot_s"].to_numpy(), out)
    _stats("e2e_latency", fin["e2e_s"].to_numpy(), out)
    out["goodput_share"] = float(ok.sum() / len(df)) if len(df) else 0.0
    out["request_goodput"] = float(ok.sum() / duration)
    out["slo_failures"] = slo_failures(df)
    out["preemptions"] = int(df["preemptions"].sum())
    out["cached_tokens"] = int(df["cached_tokens"].sum())
    if len(fin):
        # a real run observes no queueing/prefill/transfer split: those stay None
        for key, col in (("mean_queue_ms", "queue_s"), ("mean_prefill_ms", "prefill_s"),
                         ("mean_transfer_ms", "transfer_s")):
            v = fin[col].to_numpy(dtype=float)
            out[key] = float(np.nanmean(v) * 1e3) if np.isfinite(v).any() else None
    inp = int(df["input_len"].sum())
    out["prefix_cache_hit_rate"] = float(df["cached_tokens"].sum() / inp) if inp else 0.0
    out["offload_loaded_tokens"] = int(df["loaded_tokens"].sum())
    out["kv_lost_recomputes"] = int(df["recomputes"].sum())
    if len(fin):
        out["mean_kv_load_ms"] = float(fin["kv_load_s"].mean() * 1e3)
    drops = df.loc[~df["finished"], "drop_reason"].value_counts().to_dict()
    out["drop_reasons"] = {str(k): int(v) for k, v in drops.items()}
    return out
