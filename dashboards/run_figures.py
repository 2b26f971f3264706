"""Figures of one run drawn only by the dashboard: KV transfer links in % of each link's
capacity, and HBM KV pages split into live KV (held by running requests) and prefix-cache
residency (blocks kept for reuse that no request references: evictable, so a full pool of
them is not memory pressure)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go

from pdsim.report.figures import has_links

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")


def link_utilisation(res, bins: int = 300) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(bin starts in s, {link: % of its capacity, time-weighted within each bin}) of the links
    that carried KV. A link's rate is a step function (bytes/s from each change on); the bytes
    it moved in a bin over the bin's width, divided by its capacity (bytes/s), is its utilisation."""
    rec = res.record
    lu = rec.link_usage
    t_all = np.asarray(lu["time_s"], dtype=float)
    if not len(t_all):
        return np.empty(0), {}
    t0, t_end = float(t_all.min()), max(float(t_all.max()), float(rec.end_s))
    t0 = min(t0, 0.0)
    edges = np.linspace(t0, t_end + 1e-9, bins + 1)
    names = np.asarray(rec.link_names, dtype=object)
    order = np.argsort(lu["link"], kind="stable")
    codes, starts = np.unique(lu["link"][order], return_index=True)
    out: dict[str, np.ndarray] = {}
    for code, lo, hi in zip(codes, starts, list(starts[1:]) + [len(order)]):
        sel = order[lo:hi]
        t, rate = t_all[sel], np.asarray(lu["bytes_per_s"], dtype=float)[sel]
        cap = rec.link_capacity.get(str(names[code]))
        if not cap:
            continue
        cum = np.concatenate([[0.0], np.cumsum(rate[:-1] * np.diff(t))])
        moved = np.interp(edges, t, cum, left=0.0, right=cum[-1])
        out[str(names[code])] = np.diff(moved) / np.diff(edges) / float(cap) * 100.0
    return edges[:-1], out


def link_util_figure(res, bins: int = 300, max_lines: int = 10) -> go.Figure:
    """KV links in % of capacity over time: the busiest ``max_lines`` links by peak, each named
    with its capacity; the legend says the peak and mean of each."""
    fig = go.Figure()
    x, util = link_utilisation(res, bins) if has_links(res) else (np.empty(0), {})
    caps = res.record.link_capacity
    ranked = sorted(util.items(), key=lambda kv: -float(kv[1].max()))
    for k, (name, pct) in enumerate(ranked[:max_lines]):
        gbit = float(caps[name]) * 8 / 1e9
        fig.add_trace(go.Scatter(
            x=x, y=pct, mode="lines", name=f"{name} ({gbit:,.0f} Gbit/s): peak {pct.max():.1f}%, mean {pct.mean():.1f}%",
            line=dict(color=PALETTE[k % len(PALETTE)]),
            hovertemplate=f"{name}<br>%{{y:.2f}}% of {gbit:,.0f} Gbit/s at %{{x:.1f}} s<extra></extra>"))
    peak = max((float(p.max()) for p in util.values()), default=0.0)
    more = f"; {len(ranked) - max_lines} quieter links not drawn" if len(ranked) > max_lines else ""
    fig.update_layout(title=f"KV transfer links: % of capacity (busiest link peaks at {peak:.1f}%{more})",
                      xaxis_title="time (s)", yaxis_title="% of link capacity", height=350,
                      margin=dict(t=60, l=50, r=20, b=40), legend=dict(font=dict(size=10)))
    fig.update_yaxes(rangemode="tozero", ticksuffix="%")
    if peak >= 50:
        fig.add_hline(y=100, line=dict(color="black", dash="dot", width=1.5), annotation_text="capacity")
    return fig


@dataclass(frozen=True)
class KVUse:
    """An instance's HBM KV pool over the run, as fractions of its pages."""

    name: str
    role: str
    peak: float  # pool's peak use: live KV + prefix cache
    live_peak: float  # peak of the pages running requests hold
    cached_at_peak: float  # prefix-cache pages (unreferenced) when the pool was fullest
    cached_peak: float  # most prefix-cache pages held at once


def kv_use(res) -> list[KVUse]:
    """Per instance, from its step log (``kv_used`` and ``kv_cached`` at each step's start);
    instances without a step log (a real run) are left out."""
    out = []
    for info, st in zip(res.record.instances, res.record.steps or []):
        used = np.asarray(st.get("kv_used", ()), dtype=float)
        cap = max(info.kv_capacity_pages, 1)
        if not len(used) or not info.kv_capacity_pages:
            continue
        cached = np.asarray(st.get("kv_cached", np.zeros_like(used)), dtype=float)
        if len(cached) != len(used):
            cached = np.zeros_like(used)
        live = used - cached
        at = int(np.argmax(used))
        out.append(KVUse(info.name, info.role, max(info.kv_peak_pages, float(used.max())) / cap,
                         float(live.max()) / cap, float(cached[at]) / cap, float(cached.max()) / cap))
    return out


def kv_memory_figure(res, max_bars: int = 32) -> go.Figure:
    """Per instance: live KV at its peak, and the prefix cache held when the pool was fullest."""
    rows = kv_use(res)[:max_bars]
    names = [r.name for r in rows]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=names, y=[100 * r.live_peak for r in rows], name="live KV, peak (held by running requests)",
                         marker_color="#1f6feb", hovertemplate="%{x}: live KV peak %{y:.1f}% of pages<extra></extra>"))
    fig.add_trace(go.Bar(x=names, y=[100 * r.cached_at_peak for r in rows],
                         name="prefix cache when the pool was fullest (reusable, evictable)", marker_color="#b9c7dc",
                         hovertemplate="%{x}: prefix cache %{y:.1f}% of pages at the pool's peak<extra></extra>"))
    fig.update_layout(barmode="group", title="HBM KV pool per instance: live KV apart from prefix-cache residency",
                      yaxis_title="% of the instance's KV pages", height=320, margin=dict(t=60, l=50, r=20, b=40),
                      legend=dict(orientation="h", y=-0.25))
    fig.update_yaxes(range=[0, 105], ticksuffix="%")
    return fig
