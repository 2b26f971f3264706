"""Figures of sweep and compare results (shared by ``pdsim sweep``'s report.html, ``pdsim
compare`` and the dashboard): Pareto scatter with knob hovers, heatmap over two knobs (P x D
layouts), goodput vs TTFT, side-by-side comparison bars.

Every builder takes a results table (one row per configuration, as in results.csv);
``customdata`` carries the config id so the dashboard can load a clicked point's scenario.
"""
from __future__ import annotations

import html
import math

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots


def _ok(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["status"] == "ok"] if "status" in df else df


def default_knobs(df: pd.DataFrame) -> list[str]:
    """Field-path columns (they contain a dot) and the layout, when a caller names none."""
    return (["layout"] if "layout" in df else []) + [c for c in df.columns if "." in c]


def short_name(field: str) -> str:
    """``cluster.decode[0].engine.max_running_requests`` -> ``decode.max_running_requests``."""
    parts = field.replace("[0]", "").split(".")
    if parts[0] == "cluster" and len(parts) > 2:
        parts = [p for p in parts[1:] if p != "engine"]
    elif parts[0] == "workload" and len(parts) > 1:
        parts = parts[1:]
    return ".".join(parts)


def _fmt(v) -> str:
    if isinstance(v, float):
        return "" if math.isnan(v) else f"{v:.4g}"
    return str(v)


def _hover(df: pd.DataFrame, knobs: list[str], metrics: tuple[str, ...] = ()) -> list[str]:
    cols = [k for k in knobs if k in df] + [m for m in metrics if m in df]
    return ["<br>".join([f"<b>config {r['config_id']}</b>" if "config_id" in df else ""]
                        + [f"{short_name(k)} = {_fmt(r[k])}" for k in cols]) for _i, r in df.iterrows()]


def pareto_figure(df: pd.DataFrame, frontier: pd.DataFrame | None = None, knobs: list[str] | None = None,
                  x: str = "output_throughput_per_gpu", y: str = "tokens_per_s_per_user",
                  maximize: tuple[bool, bool] = (True, True)) -> go.Figure:
    """Feasible configurations in (x, y) coloured by goodput share; the non-dominated ones
    joined in red. ``frontier`` defaults to the rows ``df`` marks (``pareto`` column) or none."""
    knobs = default_knobs(df) if knobs is None else knobs
    ok = _ok(df).dropna(subset=[c for c in (x, y) if c in df])
    if frontier is None:
        frontier = ok[ok["pareto"].astype(bool)] if "pareto" in ok and (x, y) == (
            "output_throughput_per_gpu", "tokens_per_s_per_user") else ok.iloc[0:0]
    metrics = (x, y, "goodput_share", "request_goodput", "p90_ttft_ms", "p90_itl_ms")
    fig = go.Figure()
    color = ok["goodput_share"] if "goodput_share" in ok else None
    fig.add_trace(go.Scatter(
        x=ok[x], y=ok[y], mode="markers", name="configurations", text=_hover(ok, knobs, metrics), hoverinfo="text",
        customdata=ok["config_id"] if "config_id" in ok else None,
        marker=dict(size=9, color=color, colorscale="Viridis", cmin=0, cmax=1, showscale=color is not None,
                    colorbar=dict(title="goodput<br>share", x=1.02), line=dict(width=0.5, color="#333"))))
    if len(frontier):
        fr = frontier.sort_values(x)
        fig.add_trace(go.Scatter(x=fr[x], y=fr[y], mode="lines+markers", name="Pareto frontier",
                                 line=dict(color="#d62728", width=2), marker=dict(color="#d62728", size=11,
                                                                                  symbol="diamond-open"),
                                 text=_hover(fr, knobs, metrics), hoverinfo="text",
                                 customdata=fr["config_id"] if "config_id" in fr else None))
    names = {"output_throughput_per_gpu": "output tokens/s per GPU",
             "tokens_per_s_per_user": "output tokens/s per user (1000 / mean TPOT ms)",
             "request_goodput": "goodput (req/s meeting the SLO)", "p90_ttft_ms": "p90 TTFT (ms)"}
    fig.update_layout(title=f"Pareto frontier: {names.get(x, x)} vs {names.get(y, y)}",
                      xaxis_title=names.get(x, x), yaxis_title=names.get(y, y), height=480,
                      legend=dict(orientation="h", y=-0.18))
    for axis, col in (("xaxis", x), ("yaxis", y)):  # latencies spanning decades read better on a log scale
        v = pd.to_numeric(ok[col], errors="coerce").dropna() if col in ok else pd.Series(dtype=float)
        if col.endswith("_ms") and len(v) and v.min() > 0 and v.max() / v.min() > 30:
            fig.update_layout({axis: dict(type="log")})
    return fig


def goodput_ttft_figure(df: pd.DataFrame, knobs: list[str] | None = None,
                        frontier: pd.DataFrame | None = None) -> go.Figure:
    """Goodput (maximise) against p90 TTFT (minimise)."""
    if frontier is None and "pareto_goodput_ttft" in df:
        ok = _ok(df)
        frontier = ok[ok["pareto_goodput_ttft"].astype(bool)]
    return pareto_figure(df, frontier, knobs, x="p90_ttft_ms", y="request_goodput", maximize=(False, True))


def _order(values: pd.Series) -> list:
    uniq = list(dict.fromkeys(values.dropna().tolist()))
    if all(isinstance(v, (int, float)) for v in uniq):
        return sorted(uniq)
    return uniq  # first appearance: the sweep's grid order


def heatmap_figure(df: pd.DataFrame, x: str, y: str, metric: str, agg: str = "max") -> go.Figure:
    """``metric`` over two knobs (e.g. prefill_layout x decode_layout); where other knobs vary,
    each cell shows the best (``agg`` max or min) and hovers its config id."""
    ok = _ok(df).dropna(subset=[metric])
    fig = go.Figure()
    if ok.empty:
        fig.update_layout(title=f"{metric}: no feasible configuration")
        return fig
    xs, ys = _order(ok[x]), _order(ok[y])
    z = [[None] * len(xs) for _ in ys]
    ids = [[""] * len(xs) for _ in ys]
    best = ok.loc[(ok.groupby([y, x], sort=False)[metric].idxmax() if agg == "max"
                   else ok.groupby([y, x], sort=False)[metric].idxmin()).values]
    for _i, r in best.iterrows():
        yi, xi = ys.index(r[y]), xs.index(r[x])
        z[yi][xi] = float(r[metric])
        ids[yi][xi] = str(r.get("config_id", ""))
    text = [[_fmt(v) if v is not None else "" for v in row] for row in z]
    fig.add_trace(go.Heatmap(z=z, x=[str(v) for v in xs], y=[str(v) for v in ys], colorscale="Viridis",
                             colorbar=dict(title=metric), text=text, texttemplate="%{text}", customdata=ids,
                             hovertemplate=f"{x} = %{{x}}<br>{y} = %{{y}}<br>{metric} = %{{z:.4g}}"
                                           "<br>config %{customdata}<extra></extra>"))
    fig.update_layout(title=f"{metric} ({agg} over other knobs) by {x} x {y}", xaxis_title=x, yaxis_title=y,
                      height=max(360, 60 * len(ys) + 160), xaxis=dict(type="category"),
                      yaxis=dict(type="category"))
    return fig


COMPARE_PANELS = [("output_throughput_per_gpu", "output tokens/s per GPU"), ("goodput_share", "goodput share"),
                  ("p90_ttft_ms", "p90 TTFT (ms)"), ("p90_itl_ms", "p90 ITL (ms)"),
                  ("mean_tpot_ms", "mean TPOT (ms)")]


def compare_figure(df: pd.DataFrame, label: str = "scenario") -> go.Figure:
    """One bar per scenario in each panel: throughput per GPU, goodput share, latencies."""
    panels = [(m, t) for m, t in COMPARE_PANELS if m in df]
    fig = make_subplots(rows=1, cols=max(len(panels), 1), subplot_titles=[t for _m, t in panels])
    colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]
    names = df[label].astype(str).tolist()
    for c, (m, _t) in enumerate(panels, start=1):
        fig.add_trace(go.Bar(x=names, y=df[m], marker_color=[colors[i % len(colors)] for i in range(len(df))],
                             text=[_fmt(v) for v in df[m]], textposition="auto", showlegend=False,
                             hovertemplate="%{x}<br>" + m + " = %{y:.4g}<extra></extra>"), row=1, col=c)
    fig.update_layout(title="Side by side", height=420, margin=dict(t=80))
    fig.update_xaxes(tickangle=-30)
    return fig


def heatmap_axes(df: pd.DataFrame, knobs: list[str]) -> tuple[str, str] | None:
    """The two columns a sweep's heatmap spans: P x D layouts when either varies, else the
    first two varying knobs."""
    ok = _ok(df)
    if "prefill_layout" in ok and "decode_layout" in ok and ok["prefill_layout"].notna().all() and (
            ok["prefill_layout"].nunique() > 1 or ok["decode_layout"].nunique() > 1):
        return "prefill_layout", "decode_layout"
    varying = [k for k in knobs if k in ok and ok[k].nunique() > 1]
    return (varying[0], varying[1]) if len(varying) >= 2 else None


def sweep_report(df: pd.DataFrame, frontier: pd.DataFrame, knobs: list[str], path: str, title: str = "sweep",
                 summary: dict | None = None) -> None:
    """A self-contained HTML report (plotly.js inlined, opens offline)."""
    metric = "max_rate_per_gpu" if "max_rate_per_gpu" in df and df["max_rate_per_gpu"].notna().any() \
        else "request_goodput"
    figs = [pareto_figure(df, frontier, knobs), goodput_ttft_figure(df, knobs)]
    pair = heatmap_axes(df, knobs)
    if pair:
        figs.insert(0, heatmap_figure(df, pair[0], pair[1], metric))
    parts = "".join(f.to_html(full_html=False, include_plotlyjs=(i == 0)) for i, f in enumerate(figs))
    best = ""
    if summary and summary.get("best"):
        items = "".join(f"<tr><td>{html.escape(k)}</td><td>{_fmt(b['value'])}</td><td>{html.escape(b['config_id'])}"
                        f"</td><td>{html.escape(str(b.get('layout') or ''))}</td><td>"
                        + html.escape(", ".join(f"{short_name(kk)}={vv}" for kk, vv in b["knobs"].items()))
                        + "</td></tr>"
                        for k, b in summary["best"].items())
        best = ("<h2>Best configuration per objective</h2><table><tr><th>objective</th><th>value</th>"
                f"<th>config</th><th>layout</th><th>knobs</th></tr>{items}</table>")
    cols = ["config_id"] + [k for k in knobs if k in df] + [c for c in (
        "gpus", "status", "goodput_share", "request_goodput", "output_throughput_per_gpu", "tokens_per_s_per_user",
        "p90_ttft_ms", "p90_itl_ms", "mean_tpot_ms", "max_rate", "max_rate_per_gpu", "pareto", "reason") if c in df]
    table = df[cols].to_html(index=False, float_format=lambda v: f"{v:.4g}", na_rep="")
    counts = ""
    if summary:
        counts = (f"<p>{summary.get('configurations', len(df))} configurations: {summary.get('ok', '?')} simulated, "
                  f"{summary.get('infeasible', 0)} infeasible, {summary.get('errors', 0)} errors. "
                  f"Search: {html.escape(str(summary.get('mode', '')))}.</p>")
    with open(path, "w") as f:
        f.write(f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
                "<style>body{font-family:sans-serif;margin:20px} td,th{padding:2px 8px;font-size:13px}"
                "table{border-collapse:collapse} tr:nth-child(even){background:#f4f4f4}</style></head><body>"
                f"<h1>pdsim sweep: {html.escape(title)}</h1>{counts}{best}{parts}"
                f"<h2>All configurations</h2>{table}</body></html>")
