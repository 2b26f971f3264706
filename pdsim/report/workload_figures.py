"""Figure of a workload's statistics: arrivals per time bin, ISL and OSL histograms, prefix reuse.

Built from ``pdsim.workload.workload_stats`` output only (pre-binned), so the HTML stays small
however many requests the trace has.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..workload.stats import workload_stats
from ..workload.table import RequestTable


def _bars(fig: go.Figure, hist: dict, row: int, col: int, name: str, color: str) -> None:
    e = np.asarray(hist["edges"], dtype=float)
    fig.add_trace(go.Bar(x=(e[:-1] + e[1:]) / 2, y=hist["counts"], width=np.diff(e), name=name,
                         marker_color=color, hovertemplate="%{x:.0f} tokens: %{y} requests<extra></extra>"),
                  row, col)


def workload_figure(table: RequestTable | None = None, stats: dict | None = None) -> go.Figure:
    """Four panels: arrival rate per time bin, ISL histogram, OSL histogram, and the share of
    each bin's prompt tokens an infinite prefix cache would serve (with the overall ratio)."""
    if stats is None:
        if table is None:
            raise ValueError("give a RequestTable or its workload_stats")
        stats = workload_stats(table)
    b = stats["rate_bin_s"]
    fig = make_subplots(rows=2, cols=2, vertical_spacing=0.16, horizontal_spacing=0.09, subplot_titles=(
        f"arrivals (req/s per {b:g} s bin)", "input length (ISL)", "output length (OSL)",
        f"prefix reuse per {b:g} s bin (infinite cache)"))
    x = stats["rate_edges_s"]
    fig.add_trace(go.Bar(x=x, y=stats["rate_series"], width=[b] * len(x), offset=0, name="req/s",
                         marker_color="#1f77b4", hovertemplate="t=%{x:.0f} s: %{y:.2f} req/s<extra></extra>"), 1, 1)
    fig.add_hline(y=stats["mean_rate"] if np.isfinite(stats["mean_rate"]) else 0, line_dash="dot", row=1, col=1,
                  annotation_text=f"mean {stats['mean_rate']:.3g} req/s", annotation_position="top left")
    _bars(fig, stats["input_hist"], 1, 2, "ISL", "#2ca02c")
    _bars(fig, stats["output_hist"], 2, 1, "OSL", "#ff7f0e")
    if stats.get("has_hash_ids"):
        fig.add_trace(go.Scatter(x=[e + b / 2 for e in x], y=stats["reuse_series"], mode="lines+markers",
                                 name="reused share", line_color="#9467bd",
                                 hovertemplate="t=%{x:.0f} s: %{y:.1%}<extra></extra>"), 2, 2)
        fig.add_hline(y=stats["prefix_reuse_ratio"], line_dash="dot", row=2, col=2,
                      annotation_text=f"overall {stats['prefix_reuse_ratio']:.1%}", annotation_position="top left")
        fig.update_yaxes(range=[0, 1], tickformat=".0%", row=2, col=2)
    else:
        fig.add_annotation(text="no hash_ids: prefix reuse unknown", showarrow=False, xref="x4 domain",
                           yref="y4 domain", x=0.5, y=0.5)
    fig.update_xaxes(title_text="time (s)", row=1, col=1)
    fig.update_xaxes(title_text="tokens", row=1, col=2)
    fig.update_xaxes(title_text="tokens", row=2, col=1)
    fig.update_xaxes(title_text="time (s)", row=2, col=2)
    fig.update_yaxes(title_text="requests", row=1, col=2)
    fig.update_yaxes(title_text="requests", row=2, col=1)
    skipped = f", {stats['skipped_rows']} bad rows skipped" if stats.get("skipped_rows") else ""
    fig.update_layout(title=f"{stats['source']}: {stats['requests']:,} requests over {stats['duration_s']:,.0f} s"
                            f"{skipped}", showlegend=False, height=720, bargap=0, template="plotly_white")
    return fig


def write_workload_html(path: str | Path, table: RequestTable | None = None, stats: dict | None = None) -> Path:
    """Write the workload figure as a standalone HTML file (plotly.js embedded: opens offline)."""
    from ..specs.errors import SpecError

    p = Path(path)
    if p.is_dir():
        raise SpecError("a folder; expected the name of an HTML file to write", source=str(p), field="--html")
    fig = workload_figure(table, stats)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fig.write_html(str(p), include_plotlyjs=True, full_html=True)
    except OSError as err:
        raise SpecError(f"cannot write: {err.strerror or err}", source=str(p), field="--html") from None
    return p
