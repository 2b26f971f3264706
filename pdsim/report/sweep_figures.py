"""Figures of sweep results: Pareto scatter with knob hovers, heatmaps over two knobs."""
from __future__ import annotations

import html

import pandas as pd
import plotly.graph_objects as go


def _hover(df: pd.DataFrame, knobs: list[str]) -> list[str]:
    return ["<br>".join([f"config {r['config_id']}"] + [f"{k} = {r[k]}" for k in knobs])
            for _i, r in df.iterrows()]


def pareto_figure(df: pd.DataFrame, frontier: pd.DataFrame, knobs: list[str],
                  x: str = "output_throughput_per_gpu", y: str = "tokens_per_s_per_user") -> go.Figure:
    """All feasible configurations, the frontier highlighted; hover shows the knobs.
    ``customdata`` carries the config id (the dashboard loads a point's scenario by it)."""
    ok = df[df["status"] == "ok"] if "status" in df else df
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=ok[x], y=ok[y], mode="markers", name="configurations",
                             marker=dict(color="#9ecae1", size=8), text=_hover(ok, knobs), hoverinfo="text",
                             customdata=ok["config_id"]))
    if len(frontier):
        fig.add_trace(go.Scatter(x=frontier[x], y=frontier[y], mode="lines+markers", name="Pareto frontier",
                                 marker=dict(color="#d62728", size=10), text=_hover(frontier, knobs),
                                 hoverinfo="text", customdata=frontier["config_id"]))
    fig.update_layout(title="Throughput per GPU vs per user", xaxis_title="output tokens/s per GPU",
                      yaxis_title="output tokens/s per user (1000 / mean TPOT ms)", height=450)
    return fig


def heatmap_figure(df: pd.DataFrame, x: str, y: str, metric: str) -> go.Figure:
    """``metric`` over two knobs (best value where other knobs vary)."""
    ok = df[df["status"] == "ok"] if "status" in df else df
    piv = ok.pivot_table(index=y, columns=x, values=metric, aggfunc="max")
    fig = go.Figure(go.Heatmap(z=piv.values, x=[str(c) for c in piv.columns], y=[str(i) for i in piv.index],
                               colorscale="Viridis", colorbar=dict(title=metric)))
    fig.update_layout(title=f"{metric} over {x} x {y}", xaxis_title=x, yaxis_title=y, height=420)
    return fig


def goodput_ttft_figure(df: pd.DataFrame, knobs: list[str]) -> go.Figure:
    ok = df[df["status"] == "ok"] if "status" in df else df
    fig = go.Figure(go.Scatter(x=ok["p90_ttft_ms"], y=ok["request_goodput"], mode="markers", text=_hover(ok, knobs),
                               hoverinfo="text", customdata=ok["config_id"]))
    fig.update_layout(title="Goodput vs p90 TTFT", xaxis_title="p90 TTFT (ms)", yaxis_title="goodput (req/s)", height=420)
    return fig


def sweep_report(df: pd.DataFrame, frontier: pd.DataFrame, knobs: list[str], path: str, title: str = "sweep") -> None:
    figs = [pareto_figure(df, frontier, knobs), goodput_ttft_figure(df, knobs)]
    numeric = [k for k in knobs if pd.api.types.is_numeric_dtype(df[k]) and df[k].nunique() > 1]
    pd_keys = [k for k in numeric if ".prefill" in k or ".decode" in k]
    pair = pd_keys[:2] if len(pd_keys) >= 2 else numeric[:2]
    if len(pair) == 2:
        figs.append(heatmap_figure(df, pair[0], pair[1], "request_goodput"))
    parts = "".join(f.to_html(full_html=False, include_plotlyjs=(i == 0)) for i, f in enumerate(figs))
    cols = ["config_id"] + knobs + [c for c in ("status", "goodput_share", "request_goodput",
                                                "output_throughput_per_gpu", "tokens_per_s_per_user",
                                                "p90_ttft_ms", "p90_itl_ms", "max_rate", "reason") if c in df]
    table = df[cols].to_html(index=False, float_format=lambda v: f"{v:.3g}")
    with open(path, "w") as f:
        f.write(f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
                "<style>body{font-family:sans-serif;margin:20px} td,th{padding:2px 8px}</style></head><body>"
                f"<h1>pdsim sweep: {html.escape(title)}</h1>{parts}<h2>All configurations</h2>{table}</body></html>")
