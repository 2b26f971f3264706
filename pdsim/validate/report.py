"""The validation report: the metric table with verdicts, CDF overlays, per-request scatters."""
from __future__ import annotations

import html

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..report.figures import latency_cdf_figure
from .align import Aligned
from .compare import Row

COLORS = {"pass": "#2ca02c", "FAIL": "#d62728", "info": "#555", "n/a": "#999"}


def fmt(v, pct: bool = False) -> str:
    if v is None or (isinstance(v, float) and not np.isfinite(v)):
        return "n/a"
    return f"{v:+.1%}" if pct else (f"{v:,.3g}" if abs(v) < 100 else f"{v:,.0f}")


def interval(row: Row, relative: bool = True) -> str:
    """The real run's own 90 % interval of a row's metric, as 'low-high (±x%)'; '-' where not drawn."""
    if row.real_low is None:
        return "-"
    rel = row.spread
    return f"{fmt(row.real_low)}-{fmt(row.real_high)}" + (f" (±{rel:.0%})" if rel is not None and relative else "")


def step_band(row: Row, frac: float) -> str:
    """The simulated value with every step ``frac`` faster and slower (step_speed.py), as
    'fast-slow (elasticity e)'; '-' where not drawn."""
    if row.step_fast is None or row.step_slow is None:
        return "-"
    e = row.step_elasticity(frac)
    return f"{fmt(row.step_fast)}-{fmt(row.step_slow)}" + (f" (elasticity {e:.1f})" if e is not None and
                                                           np.isfinite(e) else "")


def after_cell(row: Row) -> str:
    """The simulated value with the profile re-measured after the recording, and its error."""
    if row.after is None:
        return "-"
    e = (row.after - row.real) / row.real if row.real else None
    return f"{fmt(row.after)} ({fmt(e, True)})"


def repeats_cell(row: Row) -> str:
    """The range of the real values over the recordings of the same requests; '-' where none."""
    return "-" if row.repeat_low is None else f"{fmt(row.repeat_low)}-{fmt(row.repeat_high)}"


def marks(row: Row, frac: float) -> str:
    """A failing row's marks: inside the real run's sampling interval, within the step-speed band,
    between the profiles measured before and after the recording, within the range of the real
    values of the recordings of the same requests."""
    if row.verdict != "FAIL":
        return ""
    out = ["in spread"] if row.in_spread else []
    if row.in_step_band:
        out.append(f"within ±{frac:.0%} step speed")
    if row.bracketed:
        out.append("between the profiles before and after")
    if row.in_repeats:
        out.append("within the engine's repeats")
    return "".join(f", {m}" for m in out)


def scatter_figure(al: Aligned) -> go.Figure:
    """Per request, simulated vs real TTFT and E2E (ms); the diagonal is perfect agreement."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("TTFT per request (ms)", "E2E latency per request (ms)"))
    rq, sq = al.real.requests, al.sim.requests
    for j, col in enumerate(("ttft_s", "e2e_s")):
        a = rq[col].to_numpy(dtype=float)[al.pairs[:, 0]] * 1e3
        b = sq[col].to_numpy(dtype=float)[al.pairs[:, 1]] * 1e3
        ok = np.isfinite(a) & np.isfinite(b)
        fig.add_trace(go.Scattergl(x=a[ok], y=b[ok], mode="markers", marker=dict(size=4, opacity=0.6),
                                   name="requests", showlegend=j == 0), row=1, col=j + 1)
        hi = float(max(a[ok].max(), b[ok].max())) if ok.any() else 1.0
        fig.add_trace(go.Scatter(x=[0, hi], y=[0, hi], mode="lines", line=dict(dash="dash", color="gray"),
                                 name="simulated = real", showlegend=j == 0), row=1, col=j + 1)
        fig.update_xaxes(title_text="real (ms)", row=1, col=j + 1)
        fig.update_yaxes(title_text="simulated (ms)", row=1, col=j + 1)
    fig.update_layout(title="Per-request agreement", height=420, margin=dict(t=70, l=60, r=20, b=50))
    return fig


def rows_table_html(rows: list[Row], step_speed: float = 0.0) -> str:
    steps = f"<th>simulated, every step ∓{step_speed:.0%}</th>" if step_speed else ""
    after = any(r.after is not None for r in rows)
    if after:
        steps += "<th>simulated, profile re-measured after</th>"
    out = ["<table><tr><th>metric</th><th>real</th><th>real's 90% sampling interval</th><th>simulated</th>"
           f"{steps}<th>error</th><th>tolerance</th><th>verdict</th></tr>"]
    for r in rows:
        tol = f"±{r.tolerance:.0%}" if r.tolerance is not None else ""
        band = interval(r, relative=False)
        mark = marks(r, step_speed)
        cell = f"<td>{step_band(r, step_speed)}</td>" if step_speed else ""
        if after:
            cell += f"<td>{after_cell(r)}</td>"
        out.append(f"<tr><td>{html.escape(r.metric)}</td><td>{fmt(r.real)}</td><td>{band}</td>"
                   f"<td>{fmt(r.simulated)}</td>{cell}<td>{fmt(r.error, True)}</td><td>{tol}</td>"
                   f"<td style='color:{COLORS[r.verdict]};font-weight:bold'>{r.verdict}"
                   f"{' (' + mark[2:] + ')' if mark else ''}</td></tr>")
    out.append("</table>")
    return "".join(out)


def validation_html(al: Aligned, rows: list[Row], extras: dict, path: str, title: str, notes: list[str],
                    plotlyjs: str | bool = True, step_speed: float = 0.0) -> None:
    """Write an HTML page: plotly.js inlined (``plotlyjs=True``, viewable offline) or loaded from
    its CDN (``"cdn"``: the validation page's figures stay small in the repository)."""
    cdf = latency_cdf_figure({"real": al.real, "simulated": al.sim})
    cdf.update_layout(title="Latency CDFs: real vs simulated")
    figs = [cdf, scatter_figure(al)]
    parts = [f.to_html(full_html=False, include_plotlyjs=(plotlyjs if i == 0 else False)) for i, f in enumerate(figs)]
    ks = ", ".join(f"{k} {v:.3f}" if v is not None else f"{k} n/a" for k, v in extras["ks"].items())
    pr = "; ".join(f"{k}: median |error| {v['median_abs_rel_error']:.1%} over {v['requests']} requests"
                   for k, v in extras.get("per_request", {}).items() if v["median_abs_rel_error"] is not None)
    meta = al.real.record.meta
    lis = "".join(f"<li>{html.escape(str(n))}</li>" for n in notes)
    doc = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
           "<style>body{font-family:sans-serif;margin:20px} table{border-collapse:collapse}"
           "td,th{padding:2px 12px;border-bottom:1px solid #ddd;text-align:right} td:first-child{text-align:left}"
           "</style></head><body>"
           f"<h1>{html.escape(title)}</h1>"
           f"<p>Real: {html.escape(str(meta.get('description', al.real.name)))} "
           f"({html.escape(str(meta.get('format', meta.get('kind', ''))))}); simulated: scenario "
           f"{html.escape(al.sim.name)}; {len(al.pairs)} requests aligned one to one, arrivals: {al.arrivals}.</p>"
           f"<ul>{lis}</ul>"
           f"<p>Error = (simulated - real) / real. KS distance of the distributions: {html.escape(ks)}.</p>"
           f"<p>Per request: {html.escape(pr or 'n/a')}.</p>"
           f"{rows_table_html(rows, step_speed)}" + "".join(parts) + "</body></html>")
    with open(path, "w") as f:
        f.write(doc)
