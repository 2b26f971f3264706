"""Figure of a workload's statistics (arrivals over time, ISL/OSL histograms)."""
from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..workload.table import RequestTable


def workload_figure(table: RequestTable, stats: dict) -> go.Figure:
    fig = make_subplots(rows=1, cols=3, subplot_titles=(
        f"arrival rate (req/s, {stats['rate_bin_s']:.0f} s bins)", "input length (tokens)", "output length (tokens)"))
    fig.add_trace(go.Scatter(x=stats["rate_edges_s"], y=stats["rate_series"], mode="lines", name="req/s"), 1, 1)
    fig.add_trace(go.Histogram(x=table.input_len, nbinsx=60, name="ISL"), 1, 2)
    fig.add_trace(go.Histogram(x=table.output_len, nbinsx=60, name="OSL"), 1, 3)
    fig.update_layout(title=f"{stats['source']}: {stats['requests']} requests, prefix reuse "
                            f"{stats['prefix_reuse_ratio']:.1%}", showlegend=False, height=380)
    return fig
