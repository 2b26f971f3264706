"""Fits of the compute kernels (forms in pdsim/costs/compute.py) to measured kernel tables.

Each fitter takes one system's rows of one data file and its hardware profile and returns the
constants (fractions of the profile's own peaks, latencies in us) with fit and held-out
errors, or None without data. Rows that beat the hardware's own roofline at 100% of peak
FLOP/s and HBM bandwidth cannot be explained by any efficiency <= 1 (a shape the kernel did
not really run as labelled): they are excluded and counted in ``excluded_faster_than_peak``.
"""
from __future__ import annotations

import numpy as np

from ..costs.compute import (decode_attention_s, gemm_s, gqa_pair_flops, mla_pair_flops, moe_balanced, moe_s,
                             prefill_attention_s)
from .lsq import evaluate, fit_log, heldout_mask

WBYTES = {"bf16": 2.0, "fp8": 1.0, "fp8_block": 1.0}
GEMM_STARTS = [[0.7, 16, 0.8, 5], [0.5, 128, 0.9, 2], [0.9, 1, 0.7, 8]]


def _peak(hw, dtype: str) -> float:
    return hw.gpu.peak_flops("fp8" if dtype.startswith("fp8") else "bf16")


def _physical(t_s, flops, nbytes, peak, hbm) -> np.ndarray:
    """Rows not faster than the hardware bound (3% timing tolerance)."""
    return t_s >= 0.97 * np.maximum(flops / peak, nbytes / hbm)


def _finish(params: dict, stats: dict, data: str, excluded: int = 0) -> dict:
    out = {k: float(v) for k, v in params.items()}
    out.update({k: (float(v) if not isinstance(v, str) else v) for k, v in stats.items()})
    if excluded:
        out["excluded_faster_than_peak"] = float(excluded)
    out["data"] = f"calibration/data/{data}.csv"
    return out


def gemm_table(rows, dtype: str):
    """(m, flops, bytes) of gemm.csv rows: weights K x N plus activations in and BF16 out."""
    m, n, k = (rows[c].to_numpy(float) for c in ("m", "n", "k"))
    wb = WBYTES[dtype]
    return m, 2.0 * m * n * k, k * n * wb + m * k * wb + m * n * 2.0


def fit_gemm(rows, hw, dtype: str) -> dict | None:
    """t = lat + max(F (M + m_half)/(M peak eff), B/(HBM hbm_eff)); held out: every third (N, K)."""
    rows = rows[rows["dtype"] == dtype]
    if len(rows) < 10:
        return None
    m, fl, nb = gemm_table(rows, dtype)
    y = rows["us"].to_numpy(float) * 1e-6
    peak, hbm = _peak(hw, dtype), hw.gpu.hbm_gbps * 1e9
    ok = _physical(y, fl, nb, peak, hbm) & rows["use"].to_numpy()
    m, fl, nb, y = m[ok], fl[ok], nb[ok], y[ok]
    held = heldout_mask(list(zip(rows["n"][ok], rows["k"][ok])))

    def model(p, s=slice(None)):
        return gemm_s(m[s], fl[s], nb[s], peak, hbm, p[0], p[1], p[2], p[3] * 1e-6)

    p, st = evaluate(lambda t: fit_log(lambda q: model(q, t), y[t], GEMM_STARTS, [0.05, 0, 0.05, 0], [1, 4096, 1, 50]),
                     model, y, held)
    return _finish({"eff": p[0], "m_half": p[1], "hbm_eff": p[2], "latency_us": p[3]}, st, "gemm", int((~ok).sum()))


def moe_table(rows):
    """(assignments, touched experts, hidden, inter) per row of moe.csv on one GPU."""
    tp = rows["tp"].to_numpy(float)
    a, t = moe_balanced(rows["tokens"].to_numpy(float), rows["top_k"].to_numpy(float), rows["experts"].to_numpy(float),
                        rows["ep"].to_numpy(float), tp)
    return a, t, rows["hidden"].to_numpy(float), rows["inter"].to_numpy(float), tp


def fit_moe(rows, hw, dtype: str) -> dict | None:
    """Grouped expert GEMMs, GEMM form at M = tokens per touched expert; held out: every third
    (shape, TP) group, so the check predicts expert slices the fit never saw."""
    rows = rows[rows["dtype"] == dtype]
    if len(rows) < 10:
        return None
    a, t, h, i, tp = moe_table(rows)
    wb = WBYTES[dtype]
    y = rows["us"].to_numpy(float) * 1e-6
    peak, hbm = _peak(hw, dtype), hw.gpu.hbm_gbps * 1e9
    use = rows["use"].to_numpy()
    ok = _physical(y, 6 * h * i * a / tp, t * 3 * h * i * wb, peak, hbm) & use
    bad = int((~ok & use).sum())
    a, t, h, i, tp, y = a[ok], t[ok], h[ok], i[ok], tp[ok], y[ok]
    held = heldout_mask(list(zip(rows["hidden"][ok], rows["experts"][ok], rows["tp"][ok])))

    def model(p, s=slice(None)):
        return moe_s(a[s], t[s], h[s], i[s], wb, peak, hbm, p[0], p[1], p[2], p[3] * 1e-6, tp[s])

    p, st = evaluate(lambda tr: fit_log(lambda q: model(q, tr), y[tr], GEMM_STARTS, [0.05, 0, 0.05, 0], [1, 4096, 1, 200]),
                     model, y, held)
    return _finish({"eff": p[0], "m_half": p[1], "hbm_eff": p[2], "latency_us": p[3]}, st, "moe", bad)


def _pairs(rows):
    """Causal token pairs of a prefill row: new x (prior context + new / 2), whole batch."""
    new = rows["new_tokens"].to_numpy(float)
    prior = rows["context"].to_numpy(float) - new
    return rows["batch"].to_numpy(float) * new * (prior + new / 2.0)


def _fit_prefill(rows, hw, pair_flops, data: str, key_cols) -> dict | None:
    rows = rows[(rows["phase"] == "prefill") & rows["use"]]
    if len(rows) < 5:
        return None
    pairs, pf = _pairs(rows), pair_flops(rows)
    y = rows["us"].to_numpy(float) * 1e-6
    peak = hw.gpu.peak_flops("bf16")
    ok = y >= 0.97 * pairs * pf / peak
    pairs, pf, y = pairs[ok], pf[ok], y[ok]
    held = heldout_mask(rows.loc[ok, key_cols].itertuples(index=False, name=None))

    def model(p, s=slice(None)):
        return prefill_attention_s(pairs[s], pf[s], peak, p[0], p[1] * 1e-6)

    p, st = evaluate(lambda t: fit_log(lambda q: model(q, t), y[t], [[0.5, 10], [0.8, 30]], [0.02, 0], [1, 200]),
                     model, y, held)
    return _finish({"eff": p[0], "latency_us": p[1]}, st, data, int((~ok).sum()))


def _fit_decode(rows, hw, kv_bytes, flops, data: str, key_cols, fixed_eff: float | None) -> dict | None:
    """t = lat + max(KV bytes/(HBM hbm_eff), FLOPs/(peak eff)); ``fixed_eff`` when the rows are
    all memory-bound (GQA: too few FLOPs per byte to see the compute roof)."""
    rows = rows[(rows["phase"] == "decode") & rows["use"]]
    if len(rows) < 5:
        return None
    kb, fl = kv_bytes(rows), flops(rows)
    y = rows["us"].to_numpy(float) * 1e-6
    peak, hbm = hw.gpu.peak_flops("bf16"), hw.gpu.hbm_gbps * 1e9
    ok = _physical(y, fl, kb, peak, hbm)
    kb, fl, y = kb[ok], fl[ok], y[ok]
    held = heldout_mask(rows.loc[ok, key_cols].itertuples(index=False, name=None))
    if fixed_eff is not None:
        def model(p, s=slice(None)):
            return decode_attention_s(kb[s], fl[s], peak, hbm, fixed_eff, p[0], p[1] * 1e-6)
        starts, lo, hi = [[0.8, 10], [0.5, 20]], [0.05, 0], [1, 200]
    else:
        def model(p, s=slice(None)):
            return decode_attention_s(kb[s], fl[s], peak, hbm, p[2], p[0], p[1] * 1e-6)
        starts, lo, hi = [[0.8, 10, 0.5], [0.5, 20, 0.3]], [0.05, 0, 0.02], [1, 200, 1]
    p, st = evaluate(lambda t: fit_log(lambda q: model(q, t), y[t], starts, lo, hi), model, y, held)
    eff = fixed_eff if fixed_eff is not None else p[2]
    out = _finish({"hbm_eff": p[0], "latency_us": p[1], "eff": eff}, st, data, int((~ok).sum()))
    if fixed_eff is not None:
        out["eff_from"] = "prefill fit (memory-bound rows)"
    return out


def fit_attention(rows, hw) -> dict:
    """GQA/MHA attention (FlashAttention-3 in SGLang): prefill efficiency of peak BF16 on causal
    pair FLOPs (held out: every third head layout), decode KV-read efficiency of HBM."""
    out = {}
    p = _fit_prefill(rows, hw, lambda r: gqa_pair_flops(r["heads"].to_numpy(float), r["head_dim"].to_numpy(float)),
                     "attention", ["heads", "kv_heads"])
    if p:
        out["attention_prefill"] = p
    d = _fit_decode(rows, hw,
                    lambda r: (r["batch"] * r["context"] * 4.0 * r["kv_heads"] * r["head_dim"]).to_numpy(float),
                    lambda r: (r["batch"] * r["context"] * gqa_pair_flops(r["heads"], r["head_dim"])).to_numpy(float),
                    "attention", ["heads", "kv_heads"], fixed_eff=p["eff"] if p else 0.5)
    if d:
        out["attention_decode"] = d
    return out


def fit_mla(rows, hw) -> dict:
    """DeepSeek MLA. Decode runs weight-absorbed (MQA over the kv_lora + rope latent) and reads
    the latent of every context token; prefill (rows with ``fit`` yes only) runs MHA on the
    non-absorbed heads (qk nope + rope, v), ModelSpec.attn_flops_per_token_pair. Held out:
    every third heads-per-GPU value (prefill) / batch size (decode)."""
    def pf(r):
        return mla_pair_flops(r["heads"].to_numpy(float), r["kv_lora"].to_numpy(float), r["rope_dim"].to_numpy(float))

    def pf_mha(r):
        return 2.0 * r["heads"].to_numpy(float) * (r["nope_dim"] + r["rope_dim"] + r["v_dim"]).to_numpy(float)
    out = {}
    p = _fit_prefill(rows, hw, pf_mha, "mla", ["heads", "batch"])
    if p:
        out["mla_prefill"] = p
    d = _fit_decode(rows, hw, lambda r: (r["batch"] * r["context"] * (r["kv_lora"] + r["rope_dim"]) * 2.0).to_numpy(float),
                    lambda r: r["batch"].to_numpy(float) * r["context"].to_numpy(float) * pf(r), "mla", ["batch"], None)
    if d:
        out["mla_decode"] = d
    return out
