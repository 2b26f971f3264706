"""Measured vs predicted for every calibration data row, per data file (text and plotly)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..costs.deepep import ll_time_s, normal_time_s
from ..specs.catalog import load_hardware_ref
from . import data


def comparison() -> pd.DataFrame:
    """One row per measured point: file, hardware, what, measured, predicted, error."""
    rows = []
    ll = data.load("deepep_low_latency")
    for r in ll.itertuples():
        cal = load_hardware_ref(r.hardware).calibration
        for op, elem in (("dispatch", 1.0), ("combine", 2.0)):
            p = cal.get(f"deepep_ll_{op}")
            if p:
                pred = ll_time_s(p, r.tokens_per_rank, int(r.hidden), int(r.top_k), int(r.ep_size), int(r.gpus_per_node), elem) * 1e6
                rows.append(("deepep_low_latency", r.hardware, f"EP{r.ep_size} {r.tokens_per_rank} tok {op} (us)",
                             getattr(r, f"{op}_us"), pred))
    nm = data.load("deepep_normal")
    for r in nm.itertuples():
        cal = load_hardware_ref(r.hardware).calibration
        for op, elem in (("dispatch", 1.0), ("combine", 2.0)):
            p = cal.get(f"deepep_normal_{op}")
            if not p:
                continue
            us = getattr(r, f"{op}_us")
            if not np.isnan(us):
                pred = normal_time_s(p, r.tokens_per_rank, int(r.hidden), int(r.top_k), int(r.ep_size), int(r.gpus_per_node), elem) * 1e6
                rows.append(("deepep_normal", r.hardware, f"EP{r.ep_size} {r.tokens_per_rank} tok {op} (us)", us, pred))
            else:
                key = "nvl_gbps" if r.leg == "nvlink" else "rdma_gbps"
                rows.append(("deepep_normal", r.hardware, f"EP{r.ep_size} {op} {r.leg} bottleneck (GB/s)",
                             getattr(r, f"{op}_gbps"), float(p[key])))
    mc = data.load("mooncake_transfer")
    for r in mc[mc["mode"] == "batched"].itertuples():
        p = load_hardware_ref(r.hardware).calibration.get("mooncake")
        if p:
            line = r.nics * r.nic_gbit / 8 * 1e9
            pred = float(p["setup_ms"]) + r.bytes / (line * float(p["eff"])) * 1e3
            # 64-way concurrent and loaded-cluster rows are another regime: shown, not fitted
            other = any(w in r.note for w in ("concurrent", "3P9D"))
            rows.append(("mooncake_transfer", r.hardware, f"{r.bytes / 1e9:.3g} GB, {r.nics}x{r.nic_gbit} Gb/s (ms)"
                         + (" [not fitted: " + ("64 concurrent" if "concurrent" in r.note else "loaded 3P9D") + "]" if other else ""),
                         r.ms, pred, not other))
    rows = [r if len(r) == 6 else r + (True,) for r in rows]
    rows += _compute_rows()
    df = pd.DataFrame(rows, columns=["file", "hardware", "point", "measured", "predicted", "fitted"])
    df["error"] = (df["predicted"] - df["measured"]) / df["measured"]
    return df


def report(out_html: str | None = None) -> str:
    df = comparison()
    lines = []
    for f, g in df.groupby("file", sort=False):
        fitted = g[g["fitted"]]
        if f in ("gemm", "attention"):  # hundreds of rows: the summary line and the worst five
            lines.append(f"{f}: mean |error| {fitted['error'].abs().mean():.1%} over {len(fitted)} points; worst:")
            g = g.reindex(g["error"].abs().sort_values(ascending=False).index[:5])
            for r in g.itertuples():
                lines.append(f"  {r.hardware:<5} {r.point:<60} measured {r.measured:>9.2f}  predicted {r.predicted:>9.2f}  "
                             f"{r.error:+.1%}")
            continue
        lines.append(f"{f}: mean |error| {fitted['error'].abs().mean():.1%} over {len(fitted)} fitted points"
                     + (f" ({len(g) - len(fitted)} more shown, another regime)" if len(g) > len(fitted) else ""))
        for r in g.itertuples():
            lines.append(f"  {r.hardware:<5} {r.point:<60} measured {r.measured:>9.2f}  predicted {r.predicted:>9.2f}  "
                         f"{r.error:+.1%}")
    if out_html:
        import plotly.express as px

        fig = px.scatter(df, x="measured", y="predicted", color="file", symbol="hardware", hover_name="point",
                         log_x=True, log_y=True, title="Calibration: measured vs predicted")
        lo, hi = float(df[["measured", "predicted"]].min().min()), float(df[["measured", "predicted"]].max().max())
        fig.add_shape(type="line", x0=lo, y0=lo, x1=hi, y1=hi, line=dict(dash="dash", color="gray"))
        fig.write_html(out_html, include_plotlyjs=True)
        lines.append(f"wrote {out_html}")
    return "\n".join(lines)


def _compute_rows() -> list[tuple]:
    from .fit import gemm_time_us

    rows = []
    gm = data.load("gemm")
    for (hwk, dt), g in gm.groupby(["hardware", "dtype"]):
        hw = load_hardware_ref(hwk)
        p = hw.calibration.get(f"gemm_{dt}")
        if not p:
            continue
        pred = gemm_time_us(g["m"].to_numpy(float), g["n"].to_numpy(float), g["k"].to_numpy(float),
                            hw.gpu.peak_flops(dt), hw.gpu.hbm_gbps * 1e9 * hw.efficiency.hbm,
                            hw.efficiency.mem_latency_us, float(p["eff"]), float(p["m_half"]), 1.0 if dt == "fp8" else 2.0)
        for r, pr in zip(g.itertuples(), pred):
            rows.append(("gemm", hwk, f"{dt} M={r.m} N={r.n} K={r.k} (us)", r.us, float(pr), True))
    at = data.load("attention")
    for hwk, g in at.groupby("hardware"):
        hw = load_hardware_ref(hwk)
        p = hw.calibration.get("attention")
        if not p:
            continue
        for r in g.itertuples():
            flops = 2.0 * r.batch * r.heads * r.head_dim * float(r.new_tokens) ** 2
            pred = float(p["latency_us"]) + flops / (hw.gpu.peak_flops("bf16") * float(p["eff"])) * 1e6
            rows.append(("attention", hwk, f"prefill b={r.batch} isl={r.new_tokens} h={r.heads} (us)", r.us, pred, True))
    return rows
