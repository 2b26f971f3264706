"""The experiment's HTML report: tables of means with intervals and of paired differences,
latency CDFs per policy, and metric-vs-load curves with confidence bands."""
from __future__ import annotations

import html
import math
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative

from ..report.figures import MISSING_PLOTLY_NOTE, plotly_script_tag, write_plotly_js

LATENCY_LABEL = {"ttft_s": "TTFT (s)", "tpot_s": "TPOT (s)", "e2e_s": "E2E latency (s)"}
LOAD_METRICS = ("request_goodput", "goodput_share", "p90_ttft_ms", "prefill_tokens")


def _colour(i: int) -> str:
    pal = qualitative.Plotly
    return pal[i % len(pal)]


def _rgba(hex_colour: str, alpha: float) -> str:
    h = hex_colour.lstrip("#")
    r, g, b = int(h[0:2], 16), int(h[2:4], 16), int(h[4:6], 16)
    return f"rgba({r},{g},{b},{alpha})"


def _num(v) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    a = abs(v)
    if a != 0 and (a >= 1e5 or a < 1e-3):
        return f"{v:.3g}"
    return f"{v:,.4g}" if a < 100 else f"{v:,.1f}"


def cdf_figure(mq: pd.DataFrame, deployment: str, workload: str, latency: str, policies: list[str]) -> go.Figure:
    """The mean quantile function of each policy drawn as a CDF, with its interval as a band."""
    fig = go.Figure()
    g = mq[(mq["deployment"] == deployment) & (mq["workload"] == workload) & (mq["latency"] == latency)]
    for i, pol in enumerate(policies):
        d = g[g["policy"] == pol].sort_values("q")
        if d.empty:
            continue
        c = _colour(i)
        if d["low"].notna().any():
            fig.add_trace(go.Scatter(x=pd.concat([d["low"], d["high"][::-1]]), y=pd.concat([d["q"], d["q"][::-1]]),
                                     fill="toself", fillcolor=_rgba(c, 0.15), line={"width": 0}, hoverinfo="skip",
                                     showlegend=False, name=f"{pol} band"))
        fig.add_trace(go.Scatter(x=d["value"], y=d["q"], mode="lines", name=pol, line={"color": c}))
    fig.update_layout(title=f"{LATENCY_LABEL.get(latency, latency)} CDF: {deployment} / {workload}",
                      xaxis_title=LATENCY_LABEL.get(latency, latency), yaxis_title="fraction of finished requests",
                      template="plotly_white", height=380)
    return fig


def load_figure(summary: pd.DataFrame, deployment: str, metric: str, policies: list[str]) -> go.Figure:
    """``metric`` against the workloads' offered load, one line per policy with its interval band."""
    fig = go.Figure()
    g = summary[(summary["deployment"] == deployment) & (summary["metric"] == metric) & summary["load"].notna()]
    for i, pol in enumerate(policies):
        d = g[g["policy"] == pol].sort_values("load")
        if d.empty:
            continue
        c = _colour(i)
        if d["ci_low"].notna().any():
            fig.add_trace(go.Scatter(x=pd.concat([d["load"], d["load"][::-1]]),
                                     y=pd.concat([d["ci_low"], d["ci_high"][::-1]]), fill="toself",
                                     fillcolor=_rgba(c, 0.15), line={"width": 0}, hoverinfo="skip", showlegend=False))
        fig.add_trace(go.Scatter(x=d["load"], y=d["mean"], mode="lines+markers", name=pol, line={"color": c}))
    fig.update_layout(title=f"{metric} vs offered load: {deployment}", xaxis_title="offered load",
                      yaxis_title=metric, template="plotly_white", height=380)
    return fig


def _summary_html(summary: pd.DataFrame, deployment: str, workload: str, policies: list[str], metrics) -> str:
    g = summary[(summary["deployment"] == deployment) & (summary["workload"] == workload)]
    head = "".join(f"<th>{html.escape(m)}</th>" for m in metrics)
    body = []
    for pol in policies:
        cells = []
        for m in metrics:
            r = g[(g["policy"] == pol) & (g["metric"] == m)]
            if r.empty:
                cells.append("<td>-</td>")
                continue
            r = r.iloc[0]
            cells.append(f"<td class='num'>{_num(r['mean'])}<br><span class='ci'>[{_num(r['ci_low'])}, "
                         f"{_num(r['ci_high'])}]</span></td>")
        body.append(f"<tr><th>{html.escape(pol)}</th>{''.join(cells)}</tr>")
    return f"<table class='results'><tr><th>policy</th>{head}</tr>{''.join(body)}</table>"


def _paired_html(pt: pd.DataFrame, deployment: str, workload: str, metrics) -> str:
    g = pt[(pt["deployment"] == deployment) & (pt["workload"] == workload)]
    if g.empty:
        return ""
    rows = []
    for _, r in g[g["metric"].isin(metrics)].iterrows():
        mark = " class='sig'" if r["significant"] else ""
        rel = f"{r['rel_diff']:+.1%}" if pd.notna(r["rel_diff"]) else "-"
        rows.append(f"<tr{mark}><td>{html.escape(r['policy'])}</td><td>{html.escape(r['metric'])}</td>"
                    f"<td class='num'>{_num(r['mean_diff'])}</td><td class='num'>[{_num(r['ci_low'])}, "
                    f"{_num(r['ci_high'])}]</td><td class='num'>{rel}</td><td class='num'>{_num(r['p_value'])}</td>"
                    f"<td class='num'>{_num(r['p_holm'])}</td><td class='num'>{int(r['n'])}</td></tr>")
    return ("<table class='results'><tr><th>policy</th><th>metric</th><th>difference</th><th>interval</th>"
            "<th>relative</th><th>p</th><th>p (Holm)</th><th>pairs</th></tr>" + "".join(rows) + "</table>")


CSS = ("body{font-family:sans-serif;margin:20px;max-width:1400px} table.results{border-collapse:collapse;"
       "margin:8px 0 20px} table.results td,table.results th{border:1px solid #ddd;padding:4px 8px;font-size:13px}"
       " td.num{text-align:right;white-space:nowrap} .ci{color:#777;font-size:11px} tr.sig td{background:#eef7ee}")


def experiment_report(path: str | Path, spec, summary: pd.DataFrame, pt: pd.DataFrame, mq: pd.DataFrame,
                      counts: dict, standalone: bool = False) -> Path:
    """Write ``report.html`` (plotly.js next to it unless ``standalone``)."""
    path = Path(path)
    policies = [p.name for p in spec.policies]
    metrics = list(spec.metrics)
    conf = f"{spec.confidence:.0%}"
    parts = [f"<h1>pdsim experiment: {html.escape(spec.name)}</h1>"]
    if spec.description:
        parts.append(f"<p>{html.escape(spec.description)}</p>")
    parts.append(f"<p>{counts['runs']} runs ({len(spec.seeds)} replicates of {len(policies)} policies x "
                 f"{len(spec.workloads)} workloads x {len(spec.deployments)} deployments): {counts['ok']} simulated, "
                 f"{counts['infeasible']} infeasible, {counts['errors']} errors. Means with {conf} t intervals across "
                 f"replicates; differences are paired by replicate (common random numbers: the same arrivals and "
                 f"lengths for every policy) against <b>{html.escape(spec.baseline_name)}</b>, paired t-test, Holm's "
                 f"adjustment over the policies; shaded rows are significant at {1 - spec.confidence:g}.</p>")
    figs: list[go.Figure] = []
    for dep in [d.name for d in spec.deployments]:
        for wl in [w.name for w in spec.workloads]:
            parts.append(f"<h2>{html.escape(dep)} / {html.escape(wl)}</h2>")
            parts.append(_summary_html(summary, dep, wl, policies, metrics))
            parts.append(_paired_html(pt, dep, wl, metrics))
            for lat in ("ttft_s", "e2e_s"):
                fig = cdf_figure(mq, dep, wl, lat, policies)
                if fig.data:
                    parts.append(fig.to_html(full_html=False, include_plotlyjs=False))
                    figs.append(fig)
        loads = summary[(summary["deployment"] == dep)]["load"].dropna().unique()
        if len(loads) >= 2:
            parts.append(f"<h2>{html.escape(dep)}: against offered load</h2>")
            for m in LOAD_METRICS:
                fig = load_figure(summary, dep, m, policies)
                if fig.data:
                    parts.append(fig.to_html(full_html=False, include_plotlyjs=False))
                    figs.append(fig)
    if not standalone:
        write_plotly_js(path.parent)
    page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(spec.name)}</title>"
            f"<style>{CSS}</style>{plotly_script_tag(standalone)}</head><body>{''.join(parts)}"
            f"{'' if standalone else MISSING_PLOTLY_NOTE}</body></html>")
    path.write_text(page, encoding="utf-8")
    return path
