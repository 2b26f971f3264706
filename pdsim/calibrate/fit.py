"""Fit the free constants of the calibrated cost models and write them into the profiles.

Each model is linear in its unknowns (a fixed latency plus bytes over a bandwidth), so the fit
is a non-negative least squares on relative error. Prediction error is reported on the fit
(MAPE) and by leave-one-out cross-validation (``loo_mape``: every point predicted by a model
fitted without it), the held-out check. Systems without data of their own are derived from a
measured one by scaling its bandwidths with the hardware ratio (DOMAIN.md s6) and marked so.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import yaml

from ..costs.comm import deepep_legs
from ..specs.catalog import hardware_dir, hardware_keys, load_hardware_ref
from . import data


def _nnls_rel(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative least squares on relative error (rows scaled by 1/y); a tiny active set."""
    Xs, ys = X / y[:, None], np.ones_like(y)
    active = list(range(X.shape[1]))
    while True:
        coef = np.zeros(X.shape[1])
        sol, *_ = np.linalg.lstsq(Xs[:, active], ys, rcond=None)
        coef[active] = sol
        neg = [a for a, c in zip(active, sol) if c < 0]
        if not neg:
            return coef
        active.remove(neg[0])


def _errors(X: np.ndarray, y: np.ndarray, coef: np.ndarray) -> tuple[float, float]:
    fit = float(np.mean(np.abs(X @ coef - y) / y))
    if len(y) <= X.shape[1]:
        return fit, float("nan")
    loo = []
    for i in range(len(y)):
        m = np.arange(len(y)) != i
        c = _nnls_rel(X[m], y[m])
        loo.append(abs(X[i] @ c - y[i]) / y[i])
    return fit, float(np.mean(loo))


def _legs(df, elem: float, dedup: bool) -> np.ndarray:
    return np.array([deepep_legs(r.tokens_per_rank, int(r.hidden), int(r.top_k), int(r.ep_size),
                                 int(r.gpus_per_node), elem, dedup) for r in df.itertuples()])


def fit_deepep_ll(df, hw_key: str, op: str, base_us: float | None = None) -> dict | None:
    """t_us = base + nvl_bytes/nvl_bw + rdma_bytes/rdma_bw (1/bw as unknowns, us per byte).

    A table at one token count cannot separate the fixed latency from the bandwidth terms:
    then ``base_us`` (the same kernel's latency fitted where tokens vary) is held fixed."""
    rows = df[df["hardware"] == hw_key]
    if rows.empty:
        return None
    elem = 1.0 if op == "dispatch" else 2.0
    legs = _legs(rows, elem, dedup=False)
    X = np.column_stack([np.ones(len(rows)), legs[:, 0], legs[:, 1]])
    y = rows[f"{op}_us"].to_numpy(float)
    has_rdma = legs[:, 1].max() > 0
    cols = [0, 1, 2] if has_rdma else [0, 1]
    coef = np.zeros(3)
    if rows["tokens_per_rank"].nunique() == 1 and base_us is not None:
        coef[0] = base_us
        free = cols[1:]
        coef[free] = _nnls_rel(X[:, free], y - base_us)
        fit, loo = _errors(X[:, free], y - base_us, coef[free])
    else:
        coef[cols] = _nnls_rel(X[:, cols], y)
        fit, loo = _errors(X[:, cols], y, coef[cols])
    out = {"base_us": coef[0], "nvl_gbps": 1e-3 / coef[1] if coef[1] > 0 else float("inf"), "fit_mape": fit,
           "loo_mape": loo, "points": float(len(y)), "data": "calibration/data/deepep_low_latency.csv"}
    out["rdma_gbps"] = 1e-3 / coef[2] if has_rdma and coef[2] > 0 else float("nan")
    return out


def fit_deepep_normal(df, hw_key: str, op: str) -> dict | None:
    rows = df[df["hardware"] == hw_key]
    if rows.empty:
        return None
    out: dict = {"data": "calibration/data/deepep_normal.csv"}
    bw = rows[rows[f"{op}_gbps"].notna()]
    if len(bw):
        for leg in ("nvlink", "rdma"):
            v = bw.loc[bw["leg"] == leg, f"{op}_gbps"].to_numpy(float)
            if len(v):
                key = "nvl_gbps" if leg == "nvlink" else "rdma_gbps"
                out[key] = float(v.mean())
                if len(v) > 1:  # held out: each point against the mean of the others
                    out[f"{key}_loo_mape"] = float(np.mean([abs(v[i] - np.delete(v, i).mean()) / v[i] for i in range(len(v))]))
    tm = rows[rows[f"{op}_us"].notna()]
    if len(tm):
        elem = 1.0 if op == "dispatch" else 2.0
        legs = _legs(tm, elem, dedup=True)
        X = np.column_stack([np.ones(len(tm)), legs[:, 0]])
        y = tm[f"{op}_us"].to_numpy(float)
        coef = _nnls_rel(X, y)
        out["base_us"] = float(coef[0])
        out["nvl_gbps"] = 1e-3 / coef[1]
        out["fit_mape"], out["loo_mape"] = _errors(X, y, coef)
    return out


def fit_mooncake(df, hw_key: str, hw) -> dict | None:
    """t_ms = setup + bytes / (eff x NICs x line rate) on single-request batched rows."""
    rows = df[(df["hardware"] == hw_key) & (df["mode"] == "batched")]
    rows = rows[~rows["note"].str.contains("3P9D|concurrent", regex=True)]
    if len(rows) < 2:
        return None
    line = rows["nics"].to_numpy(float) * rows["nic_gbit"].to_numpy(float) / 8 * 1e9  # bytes/s
    X = np.column_stack([np.ones(len(rows)), rows["bytes"].to_numpy(float) / line * 1e3])  # ms at line rate
    y = rows["ms"].to_numpy(float)
    coef = _nnls_rel(X, y)
    fit, loo = _errors(X, y, coef)
    out = {"setup_ms": float(coef[0]), "eff": float(1.0 / coef[1]), "fit_mape": fit, "loo_mape": loo,
           "points": float(len(y)), "data": "calibration/data/mooncake_transfer.csv"}
    pair = df[(df["hardware"] == hw_key) & df["note"].str.contains("page 64", regex=False)]
    per_page = pair[pair["mode"] == "per_page"]
    batched = pair[pair["mode"] == "batched"]
    if len(per_page) and len(batched):
        # DeepSeek-V3, 10K tokens, page 64: 157 pages x 61 layers per-page submissions
        pages = -(-10000 // 64)
        out["per_page_us"] = float((per_page["ms"].iloc[0] - batched["ms"].iloc[0]) * 1e3 / (pages * 61))
    return out


def gemm_time_us(m, n, k, peak, hbm, lat_us, eff, m_half, wbytes):
    """Roofline GEMM (same form as RooflineStepCost._gemm): compute at eff x M/(M+m_half) of
    peak vs bytes (weights + activations in/out) at achievable HBM bandwidth, plus latency."""
    flops = 2.0 * m * n * k
    nbytes = k * n * wbytes + m * k * wbytes + m * n * 2
    return np.maximum(flops / (peak * eff * m / (m + m_half)), nbytes / hbm) * 1e6 + lat_us


def _heldout_mask(df) -> np.ndarray:
    """Hold out every third (n, k) shape: the check predicts shapes the fit never saw."""
    shapes = sorted(set(zip(df["n"], df["k"])))
    held = {s for i, s in enumerate(shapes) if i % 3 == 0}
    return np.array([(n, k) in held for n, k in zip(df["n"], df["k"])])


def fit_gemm(df, hw_key: str, dtype: str, hw) -> dict | None:
    """Grid search of (eff, m_half) minimising mean relative error on the training shapes."""
    rows = df[(df["hardware"] == hw_key) & (df["dtype"] == dtype)]
    if len(rows) < 10:
        return None
    m, n, k = (rows[c].to_numpy(float) for c in ("m", "n", "k"))
    y = rows["us"].to_numpy(float)
    peak = hw.gpu.peak_flops(dtype)
    hbm = hw.gpu.hbm_gbps * 1e9 * hw.efficiency.hbm
    lat = hw.efficiency.mem_latency_us
    wb = 1.0 if dtype == "fp8" else 2.0
    held = _heldout_mask(rows)
    best = None
    for eff in np.arange(0.30, 1.0001, 0.01):
        for m_half in (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512):
            err = np.abs(gemm_time_us(m, n, k, peak, hbm, lat, eff, m_half, wb) - y) / y
            score = err[~held].mean()
            if best is None or score < best[0]:
                best = (score, eff, m_half, err)
    score, eff, m_half, err = best
    return {"eff": float(eff), "m_half": float(m_half), "fit_mape": float(score), "heldout_mape": float(err[held].mean()),
            "points": float(len(y)), "data": "calibration/data/gemm.csv"}


def fit_attention(df, hw_key: str, hw) -> dict | None:
    """Causal prefill attention: t = lat + FLOPs / (peak_bf16 x eff), FLOPs = 2 x batch x
    heads x head_dim x isl^2 (QK^T and PV over the causal half)."""
    rows = df[(df["hardware"] == hw_key) & (df["phase"] == "prefill")]
    if len(rows) < 5:
        return None
    flops = 2.0 * rows["batch"] * rows["heads"] * rows["head_dim"] * rows["new_tokens"].astype(float) ** 2
    X = np.column_stack([np.ones(len(rows)), flops.to_numpy(float) / hw.gpu.peak_flops("bf16") * 1e6])
    y = rows["us"].to_numpy(float)
    coef = _nnls_rel(X, y)
    fit, loo = _errors(X, y, coef)
    return {"eff": float(1.0 / coef[1]), "latency_us": float(coef[0]), "fit_mape": fit, "loo_mape": loo,
            "points": float(len(y)), "data": "calibration/data/attention.csv"}


def fit_allreduce(df, hw_key: str) -> dict | None:
    rows = df[df["hardware"] == hw_key]
    if rows.empty:
        return None
    intra = rows.loc[rows["scope"] == "intranode", "busbw_gbps"]
    inter = rows.loc[rows["scope"].str.startswith("internode"), "busbw_gbps"]
    if intra.empty or inter.empty:
        return None
    return {"intranode_gbps": float(intra.iloc[0]), "internode_gbps": float(inter.iloc[0]),
            "data": "calibration/data/nccl_allreduce.csv"}


def _derive(params: dict, src_hw, dst_hw, what: str) -> dict:
    """Scale a measured system's bandwidths to another system (NVLink, NIC per GPU)."""
    out = dict(params)
    nv = dst_hw.gpu.nvlink_gbps / src_hw.gpu.nvlink_gbps
    nic = dst_hw.nic_bytes_per_gpu / src_hw.nic_bytes_per_gpu
    for k in list(out):
        if k.startswith("nvl_gbps") and not k.endswith("mape"):
            out[k] = float(out[k]) * nv
        if k in ("rdma_gbps", "intranode_gbps"):
            out[k] = float(out[k]) * (nic if k == "rdma_gbps" else nv)
        if k == "internode_gbps":
            out[k] = float(out[k]) * nic
    if any(k.startswith(("nvl", "rdma", "intra", "inter")) for k in params):
        out["derived_from"] = f"{src_hw.name} ({what}; NVLink x{nv:.2f}, NIC/GPU x{nic:.2f})"
    else:  # efficiencies and latencies carry over as fractions of the target's own peaks
        out["derived_from"] = f"{src_hw.name} ({what}; same fraction of peak)"
    return out


def fit_all(systems: list[str] | None = None, write: bool = True, quiet: bool = False) -> dict:
    """Fit every model for every system; write ``calibration:`` blocks into the profiles."""
    ll = data.load("deepep_low_latency", ("ep_size", "tokens_per_rank", "dispatch_us", "combine_us"))
    nm = data.load("deepep_normal", ("ep_size", "tokens_per_rank", "leg"))
    mc = data.load("mooncake_transfer", ("bytes", "ms", "mode", "nics", "nic_gbit"))
    ar = data.load("nccl_allreduce", ("scope", "busbw_gbps"))
    gm = data.load("gemm", ("dtype", "m", "n", "k", "us"))
    at = data.load("attention", ("phase", "batch", "new_tokens", "heads", "head_dim", "us"))
    keys = systems or hardware_keys()
    hws = {k: load_hardware_ref(k) for k in set(keys) | {"h800", "h100", "h200"}}
    measured: dict[str, dict] = {}
    varied = [k for k in hws if ll.loc[ll["hardware"] == k, "tokens_per_rank"].nunique() > 1]
    ll_base = {op: fit_deepep_ll(ll, varied[0], op)["base_us"] for op in ("dispatch", "combine")} if varied else {}
    for k in hws:
        m = {}
        for op in ("dispatch", "combine"):
            if (p := fit_deepep_ll(ll, k, op, ll_base.get(op))) is not None:
                m[f"deepep_ll_{op}"] = p
            if (p := fit_deepep_normal(nm, k, op)) is not None:
                m[f"deepep_normal_{op}"] = p
        if (p := fit_mooncake(mc, k, hws[k])) is not None:
            m["mooncake"] = p
        if (p := fit_allreduce(ar, k)) is not None:
            m["allreduce"] = p
        for dt in ("bf16", "fp8"):
            if (p := fit_gemm(gm, k, dt, hws[k])) is not None:
                m[f"gemm_{dt}"] = p
        if (p := fit_attention(at, k, hws[k])) is not None:
            m["attention"] = p
        measured[k] = m
    # Fill gaps: RDMA legs only measured on H800; H100 NVLink-only fits borrow them (same CX-7 NICs)
    results: dict[str, dict] = {}
    for k in keys:
        hw = hws[k]
        out: dict[str, dict] = {}
        for model in ("deepep_ll_dispatch", "deepep_ll_combine", "deepep_normal_dispatch", "deepep_normal_combine",
                      "mooncake", "allreduce", "gemm_bf16", "gemm_fp8", "attention"):
            own = measured[k].get(model)
            need = ("base_us", "nvl_gbps", "rdma_gbps") if model.startswith("deepep") else ()
            if own is not None and all(kk in own and np.isfinite(float(own[kk])) for kk in need):
                out[model] = own
                continue
            # donor: the measured system whose NVLink is closest (the NVLink legs dominate)
            cands = [d for d in ("h800", "h100", "h200") if d in measured and measured[d].get(model) is not None and d != k]
            donor = min(cands, key=lambda d: abs(np.log(hws[d].gpu.nvlink_gbps / hw.gpu.nvlink_gbps)), default=None)
            if donor is None and own is not None and model.startswith("deepep"):
                donor = "h800"  # only the RDMA leg is missing: H800 measured it
            if donor is None:
                continue
            base = dict(measured[donor][model])
            if own is not None:  # keep what was measured, take the rest from the donor
                base.update({kk: v for kk, v in own.items() if isinstance(v, float) and np.isfinite(v)})
            if model.startswith("deepep") and not np.isfinite(float(base.get("rdma_gbps", np.nan))):
                # RDMA legs measured on H800 only: same CX-7 NICs, scaled to the donor's NIC share
                src = hws["h800"].nic_bytes_per_gpu
                base["rdma_gbps"] = float(measured["h800"][model]["rdma_gbps"]) * hws[donor].nic_bytes_per_gpu / src
            if model.startswith("deepep") and "base_us" not in base:
                # kernel latency: only fitted where the token count varies (the H100 tables)
                base["base_us"] = float(measured["h100"][model]["base_us"])
            out[model] = _derive(base, hws[donor], hw, "derived") if own is None else dict(base, derived_from=f"partly {donor}")
        if hw.gpu.fp8_tflops == 0:  # DeepEP and FP8 GEMMs need Hopper: none for Ampere
            out = {m: v for m, v in out.items() if not m.startswith("deepep") and m != "gemm_fp8"}
        results[k] = {m: {kk: (round(float(v), 6) if not isinstance(v, str) else v) for kk, v in p.items()}
                      for m, p in out.items()}
        if write:
            write_profile(k, results[k])
    if not quiet:
        for k, models in results.items():
            for m, p in models.items():
                tag = f" [{p['derived_from']}]" if "derived_from" in p else ""
                print(f"{k:<6} {m:<24} " + ", ".join(f"{kk}={v:.4g}" for kk, v in p.items()
                                                          if isinstance(v, float) and not kk.endswith(("mape", "points")))
                      + (f"  fit {p['fit_mape']:.1%}" if "fit_mape" in p else "")
                      + (f"  held-out {p['loo_mape']:.1%}" if "loo_mape" in p and np.isfinite(p['loo_mape']) else "")
                      + (f"  held-out shapes {p['heldout_mape']:.1%}" if "heldout_mape" in p else "")
                      + tag)
    return results


def write_profile(key: str, calibration: dict) -> Path:
    """Replace the ``calibration:`` block of hardware_profiles/<key>.yaml, keeping the header."""
    path = hardware_dir() / f"{key}.yaml"
    text = path.read_text()
    header = "".join(line for line in text.splitlines(keepends=True) if line.startswith("#"))
    doc = yaml.safe_load(text)
    clean = {m: {k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in p.items()}
             for m, p in calibration.items()}
    doc["calibration"] = {m: {k: v for k, v in p.items() if v is not None} for m, p in clean.items()}
    doc.setdefault("sources", {})["calibration"] = "pdsim calibrate fit on calibration/data/*.csv (see each model's data:)"
    path.write_text(header + yaml.safe_dump(doc, sort_keys=False, width=120))
    return path
