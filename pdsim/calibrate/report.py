"""Measured vs predicted for every calibration data row, per data file (text table and plotly).

Predictions use the constants written in each row's hardware profile (``calibration:``) and the
same forms the step models use (costs/compute.py, costs/deepep.py, the ring all-reduce and the
Mooncake transfer form). Rows a fit skipped (``fit: no`` in the data, or faster than the
hardware's own peak) are shown and marked, not hidden.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..costs.compute import (decode_attention_s, effective_sharp, gemm_s, gqa_pair_flops, mla_pair_flops, moe_s,
                             prefill_attention_s)
from ..costs.deepep import ELEM_BYTES, ll_time_s, normal_time_s
from ..specs.catalog import hardware_keys, load_hardware_ref
from . import data
from .fit_comm import legs
from .fit_compute import WBYTES, _pairs, _physical, gemm_table, moe_table

FAST = "faster than this GPU's peak FLOP/s and HBM bandwidth allow: not fitted"

COLUMNS = ["file", "hardware", "model", "point", "unit", "measured", "predicted", "fitted", "note"]


def _cal(hw_key: str) -> dict:
    return load_hardware_ref(hw_key).calibration if hw_key in hardware_keys() else {}


def _rows(file, hwk, model, points, unit, y, pred, used, notes) -> list[tuple]:
    return [(file, hwk, model, p, unit, float(a), float(b), bool(u), n) for p, a, b, u, n in zip(points, y, pred, used, notes)]


def _compute_rows() -> list[tuple]:
    out = []
    g = data.load("gemm")
    for (hwk, dt), r in g.groupby(["hardware", "dtype"]):
        p = _cal(hwk).get(f"gemm_{dt}")
        if not p:
            continue
        hw = load_hardware_ref(hwk)
        m, fl, nb = gemm_table(r, dt)
        pred = gemm_s(m, fl, nb, hw.gpu.peak_flops("fp8" if dt.startswith("fp8") else "bf16"), hw.gpu.hbm_gbps * 1e9,
                      p["eff"], p.get("m_tile", 1.0), p["hbm_eff"], p["latency_us"] * 1e-6, effective_sharp(p.get("sharp"))) * 1e6
        pts = [f"{dt} {'' if g == 1 else f'{int(g)}x '}M={a} N={b} K={c}"
               for g, a, b, c in zip(r["groups"], r["m"], r["n"], r["k"])]
        ok = _physical(r["us"].to_numpy(float) * 1e-6, fl, nb, hw.gpu.peak_flops("fp8" if dt.startswith("fp8") else "bf16"),
                       hw.gpu.hbm_gbps * 1e9)
        notes = np.where(ok, r["note"], FAST)
        out += _rows("gemm", hwk, f"gemm_{dt}", pts, "us", r["us"], pred, r["use"].to_numpy() & ok, notes)
    mo = data.load("moe")
    for (hwk, dt), r in mo.groupby(["hardware", "dtype"]):
        p = _cal(hwk).get(f"moe_{dt}")
        if not p:
            continue
        hw = load_hardware_ref(hwk)
        a, t, h, i, tp = moe_table(r)
        pred = moe_s(a, t, h, i, WBYTES[dt], hw.gpu.peak_flops("fp8" if dt.startswith("fp8") else "bf16"),
                     hw.gpu.hbm_gbps * 1e9, p["eff"], p.get("m_tile", 1.0), p["hbm_eff"], p["latency_us"] * 1e-6, tp,
                     effective_sharp(p.get("sharp"))) * 1e6
        pts = [f"{dt} {hh}x{ii} E{e} TP{q} tokens={n}" for hh, ii, e, q, n in
               zip(r["hidden"], r["inter"], r["experts"], r["tp"], r["tokens"])]
        peak = hw.gpu.peak_flops("fp8" if dt.startswith("fp8") else "bf16")
        ok = _physical(r["us"].to_numpy(float) * 1e-6, 6 * h * i * a / tp, t * 3 * h * i * WBYTES[dt], peak, hw.gpu.hbm_gbps * 1e9)
        notes = np.where(ok | ~r["use"].to_numpy(), r["note"], FAST)
        out += _rows("moe", hwk, f"moe_{dt}", pts, "us", r["us"], pred, r["use"].to_numpy() & ok, notes)
    for name in ("attention", "mla"):
        at = data.load(name)
        for (hwk, phase), r in at.groupby(["hardware", "phase"]):
            cal = _cal(hwk)
            hw = load_hardware_ref(hwk)
            peak, hbm = hw.gpu.peak_flops("attn"), hw.gpu.hbm_gbps * 1e9
            heads = r["heads"].to_numpy(float)
            if phase == "prefill":
                key = "mla_prefill" if name == "mla" and "mla_prefill" in cal else "attention_prefill"
                p = cal.get(key)
                if not p:
                    continue
                pf = (gqa_pair_flops(heads, r["head_dim"].to_numpy(float)) if name == "attention" else
                      2.0 * heads * (r["nope_dim"] + r["rope_dim"] + r["v_dim"]).to_numpy(float))
                pred = prefill_attention_s(_pairs(r), pf, peak, p["eff"], p["latency_us"] * 1e-6,
                                           (r["batch"] * r["new_tokens"]).to_numpy(float), p.get("row_pairs", 0.0)) * 1e6
            else:
                key = "mla_decode" if name == "mla" else "attention_decode"
                p = cal.get(key)
                if not p:
                    continue
                bc = (r["batch"] * r["context"]).to_numpy(float)
                if name == "attention":
                    kb = bc * 4.0 * r["kv_heads"].to_numpy(float) * r["head_dim"].to_numpy(float)
                    fl = bc * gqa_pair_flops(heads, r["head_dim"].to_numpy(float))
                else:
                    kb = bc * (r["kv_lora"] + r["rope_dim"]).to_numpy(float) * 2.0
                    fl = bc * mla_pair_flops(heads, r["kv_lora"].to_numpy(float), r["rope_dim"].to_numpy(float))
                pred = decode_attention_s(kb, fl, peak, hbm, p["eff"], p["hbm_eff"], p["latency_us"] * 1e-6) * 1e6
            pts = [f"{phase} b={b} new={n} ctx={c} heads={h}" for b, n, c, h in
                   zip(r["batch"], r["new_tokens"], r["context"], r["heads"])]
            out += _rows(name, hwk, key, pts, "us", r["us"], pred, r["use"], r["note"])
            mha = r["heads"] == r["kv_heads"] if name == "attention" and phase == "prefill" else None
            if mha is not None and mha.any() and "row_pairs" in cal.get("mla_prefill", {}):
                # the rows mla_prefill is fitted on (fit_compute.fit_mha_prefill): FA3's MHA rows
                m, q = r[mha], cal["mla_prefill"]
                pm = prefill_attention_s(_pairs(m), gqa_pair_flops(m["heads"].to_numpy(float), m["head_dim"].to_numpy(float)),
                                         peak, q["eff"], q["latency_us"] * 1e-6,
                                         (m["batch"] * m["new_tokens"]).to_numpy(float), q["row_pairs"]) * 1e6
                out += _rows(name, hwk, "mla_prefill", [x for x, k in zip(pts, mha) if k], "us", m["us"], pm, m["use"],
                             m["note"])
    return out


def _comm_rows() -> list[tuple]:
    out = []
    ll = data.load("deepep_low_latency")
    for hwk, r in ll.groupby("hardware"):
        cal = _cal(hwk)
        for op in ("dispatch", "combine"):
            p = cal.get(f"deepep_ll_{op}")
            if not p:
                continue
            pred = [ll_time_s(p, x.tokens_per_rank, int(x.hidden), int(x.top_k), int(x.ep_size), int(x.gpus_per_node),
                              ELEM_BYTES[op], float(x.experts)) * 1e6 for x in r.itertuples()]
            pts = [f"EP{e} {t} tok/rank {op}" for e, t in zip(r["ep_size"], r["tokens_per_rank"])]
            out += _rows("deepep_low_latency", hwk, f"deepep_ll_{op}", pts, "us", r[f"{op}_us"], pred, r["use"], r["note"])
    nm = data.load("deepep_normal")
    for hwk, r in nm.groupby("hardware"):
        cal = _cal(hwk)
        for op in ("dispatch", "combine"):
            p = cal.get(f"deepep_normal_{op}")
            if not p:
                continue
            lg = legs(r, ELEM_BYTES[op], dedup=True)
            for x, (nvl, rdma) in zip(r.itertuples(), lg):
                t = normal_time_s(p, x.tokens_per_rank, int(x.hidden), int(x.top_k), int(x.ep_size), int(x.gpus_per_node),
                                  ELEM_BYTES[op])
                us = getattr(x, f"{op}_us")
                if np.isfinite(us):
                    out.append(("deepep_normal", hwk, f"deepep_normal_{op}", f"EP{x.ep_size} {x.tokens_per_rank} tok/rank {op}",
                                "us", us, t * 1e6, x.use, x.note))
                else:
                    leg = nvl if x.leg == "nvlink" else rdma
                    out.append(("deepep_normal", hwk, f"deepep_normal_{op}", f"EP{x.ep_size} {op} {x.leg} bottleneck",
                                "GB/s", getattr(x, f"{op}_gbps"), leg / t / 1e9, x.use, x.note))
    nc = data.load("nccl_collectives")
    for hwk, r in nc.groupby("hardware"):
        p = _cal(hwk).get("allreduce")
        if not p:
            continue
        for x in r.itertuples():
            n = int(x.gpus)
            if np.isfinite(x.us):
                pred = (p.get("base_us", 0.0) + 2 * (n - 1) * p["latency_us"]
                        + 2 * (n - 1) / n * x.message_bytes / (p["intranode_gbps"] * 1e3))
                out.append(("nccl_collectives", hwk, "allreduce", f"{n} GPUs {int(x.message_bytes)} B", "us", x.us, pred,
                            x.use, x.note))
            else:
                pred = p["intranode_gbps"] if x.nodes == 1 else p["internode_gbps"]
                out.append(("nccl_collectives", hwk, "allreduce", f"{n} GPUs on {x.nodes} node(s), bus bandwidth", "GB/s",
                            x.busbw_gbps, pred, x.use, x.note))
    mc = data.load("mooncake_transfer")
    for hwk, r in mc.groupby("hardware"):
        p = _cal(hwk).get("mooncake")
        if not p:
            continue
        for x in r.itertuples():
            line = x.nics * x.nic_gbit / 8 * 1e9
            pred = p["setup_ms"] + x.bytes / (line * p["eff"]) * 1e3
            chunks = 0.0 if np.isnan(x.chunks) else x.chunks  # work requests per sender (fit_comm.fit_mooncake)
            pred += chunks * (p.get("per_page_us", 0.0) if x.mode == "per_page" else p.get("per_chunk_us", 0.0)) * 1e-3
            used = x.use and x.regime == "single" and x.mode == "batched"
            note = x.note + ("" if used else f" [{x.regime}, {x.mode}: not in the single-transfer fit]")
            out.append(("mooncake_transfer", hwk, "mooncake", f"{x.bytes / 1e9:.3g} GB over {x.nics}x{x.nic_gbit} Gb/s",
                        "ms", x.ms, pred, used, note))
    ch = data.load("kv_transfer_chunks")
    for x in ch.itertuples():
        p = _cal(x.hardware).get("mooncake") if x.hardware in hardware_keys() else None
        if not p or x.backend != "mooncake":
            continue
        line = x.nics * x.nic_gbit / 8 * 1e9
        pred = p["setup_ms"] + x.bytes / (line * p["eff"]) * 1e3 + x.chunks * p.get("per_chunk_us", 0.0) * 1e-3
        out.append(("kv_transfer_chunks", x.hardware, "mooncake", f"{x.chunks} chunks of {x.chunk_bytes} B", "ms", x.ms, pred,
                    bool(x.use), x.note))
    return out


def comparison() -> pd.DataFrame:
    """One row per measured point: file, hardware, model, point, unit, measured, predicted,
    whether the fit used it, its note, and the relative error."""
    df = pd.DataFrame(_compute_rows() + _comm_rows(), columns=COLUMNS)
    df["error"] = (df["predicted"] - df["measured"]) / df["measured"]
    return df


def report(out_html: str | None = None,
           sections: tuple[str, ...] = ("kernels", "steps", "forward", "mixed", "overlap", "constants")) -> str:
    """Text report: measured vs predicted per kernel data file (and a plotly figure at
    ``out_html``), whole steps against published per-step figures (step_report.py), and the kind,
    uncertainty and source of every profile constant; whole forwards measured on a GPU against
    the step price (forward_report.py)."""
    from .step_report import constants_report, step_report

    df = comparison()
    lines = []
    if "kernels" not in sections:
        df = df.iloc[0:0]
    for f, g in df.groupby("file", sort=False):
        lines.append(f"== {f}.csv")
        for (hwk, model), gm in g.groupby(["hardware", "model"], sort=False):
            used, other = gm[gm["fitted"]], gm[~gm["fitted"]]
            p = _cal(hwk).get(model, {})
            held = f", held-out {p['heldout_mape']:.1%} ({p.get('heldout', '')})" if "heldout_mape" in p else ""
            fitted = f"mean |error| {used['error'].abs().mean():.1%} over {len(used)} fitted rows" if len(used) else \
                "no fitted rows"
            lines.append(f"  {hwk:<5} {model:<24} {fitted}" + held
                         + (f"; {len(other)} rows not fitted, mean |error| {other['error'].abs().mean():.1%}" if len(other) else ""))
            show = gm if len(gm) <= 12 else gm.reindex(gm["error"].abs().sort_values(ascending=False).index[:3])
            for r in show.itertuples():
                mark = "" if r.fitted else "  (not fitted)"
                lines.append(f"      {r.point:<44} measured {r.measured:>10.2f} {r.unit:<4} predicted {r.predicted:>10.2f}"
                             f"  {r.error:+.1%}{mark}")
    if out_html:
        import plotly.express as px

        fig = px.scatter(df.assign(status=np.where(df["fitted"], "fitted", "not fitted")), x="measured", y="predicted",
                         color="file", symbol="status", facet_col="unit", hover_name="point",
                         hover_data=["hardware", "model", "error", "note"], log_x=True, log_y=True,
                         title="pdsim calibration: measured vs predicted (dashed: equality)")
        fig.update_xaxes(matches=None)
        fig.update_yaxes(matches=None)
        for i, (_u, g) in enumerate(df.groupby("unit", sort=False)):
            lo = float(g[["measured", "predicted"]].min().min())
            hi = float(g[["measured", "predicted"]].max().max())
            fig.add_shape(type="line", x0=lo, y0=lo, x1=hi, y1=hi, line=dict(dash="dash", color="gray"),
                          row=1, col=i + 1)
        fig.write_html(out_html, include_plotlyjs=True)
        lines.append(f"wrote {out_html}")
    if "steps" in sections:
        lines.append(step_report())
    if "forward" in sections:
        from .forward_report import forward_report

        lines.append(forward_report())
    if "mixed" in sections:
        from .mixed_report import mixed_report

        lines.append(mixed_report())
    if "overlap" in sections:
        from .fit_overlap import overlap_report

        lines.append(overlap_report())
    if "constants" in sections:
        lines.append(constants_report())
    return "\n".join(lines)
