"""Plotly figure builders shared by the CLI's HTML report and the dashboard.

Each builder takes Results (or a mapping name -> Results to overlay runs) and returns a
plotly Figure. Timelines are binned to at most ``bins`` points so figures stay small even
for hour-long runs.
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..metrics.results import Results
from ..sim.columns import SpilledColumns, column_part, column_rows
from ..sim.record import PART_ROWS, GapHistogram
from .verdict_html import verdicts_html

RunSet = Mapping[str, Results]
PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"]


def _runs(res: Results | RunSet) -> dict[str, Results]:
    return {res.name: res} if isinstance(res, Results) else dict(res)


def _cdf(values, max_points: int = 400) -> tuple[np.ndarray, np.ndarray]:
    """(quantiles, fractions) of ``values``: an array, or a GapHistogram (not expanded)."""
    if isinstance(values, GapHistogram):
        h = values.finite()
        if h.n == 0:
            return np.empty(0), np.empty(0)
        q = np.linspace(0, 1, min(max_points, h.n))
        return h.quantiles(q), q
    v = np.sort(values[~np.isnan(values)])
    if v.size == 0:
        return v, v
    q = np.linspace(0, 1, min(max_points, v.size))
    return np.quantile(v, q), q


SLO_TERMS = [("ttft_ms", "TTFT"), ("itl_ms", "ITL"), ("tpot_ms", "TPOT"), ("e2e_ms", "E2E")]


def _slo_lines(runs: dict[str, Results]) -> list[tuple[int, float, str, str]]:
    """(panel, bound ms, legend name, colour) of each SLO bound drawn on the latency CDFs. A
    bound shared by every run is one grey line "SLO TTFT 2000 ms"; bounds that differ between
    overlaid runs are drawn per run in the run's colour, named after it."""
    out = []
    names = list(runs)
    for j, (key, label) in enumerate(SLO_TERMS):
        bounds = {name: getattr(runs[name].slo, key) for name in names}
        distinct = {b for b in bounds.values() if b}
        if not distinct:
            continue
        if len(distinct) == 1 and all(bounds.values()):
            b = distinct.pop()
            out.append((j, float(b), f"SLO {label} {b:g} ms", "gray"))
            continue
        for k, name in enumerate(names):
            if bounds[name]:
                out.append((j, float(bounds[name]), f"SLO {label} {bounds[name]:g} ms ({name})",
                            PALETTE[k % len(PALETTE)]))
    return out


def latency_cdf_figure(res: Results | RunSet, log_x: bool | None = None) -> go.Figure:
    """CDFs of TTFT, ITL, TPOT and E2E (ms), one colour per run; SLO bounds as dashed lines
    with legend entries. ``log_x``: logarithmic latency axes (None: when overlaid runs' medians
    differ more than tenfold, so a fast run stays visible beside a slow one)."""
    runs = _runs(res)
    fig = make_subplots(rows=2, cols=2, subplot_titles=("TTFT (ms)", "ITL (ms)", "TPOT (ms)", "E2E latency (ms)"))
    medians: list[list[float]] = [[], [], [], []]
    for k, (name, r) in enumerate(runs.items()):
        df = r.requests[r.requests["finished"]]
        series = [df["ttft_s"].to_numpy(), r.itl_hist, df["tpot_s"].to_numpy(), df["e2e_s"].to_numpy()]
        for j, vals in enumerate(series):
            x, y = _cdf(vals if isinstance(vals, GapHistogram) else np.asarray(vals, dtype=float))
            x = x * 1e3  # ms
            if x.size:
                medians[j].append(float(np.median(x)))
            fig.add_trace(go.Scatter(x=x, y=y, mode="lines", name=name, legendgroup=name, showlegend=j == 0,
                                     line=dict(color=PALETTE[k % len(PALETTE)])), row=j // 2 + 1, col=j % 2 + 1)
    for j, bound, name, color in _slo_lines(runs):
        fig.add_trace(go.Scatter(x=[bound, bound], y=[0, 1.01], mode="lines", name=name, legendgroup=name,
                                 line=dict(color=color, dash="dash", width=1.5),
                                 hovertemplate=name + "<extra></extra>"), row=j // 2 + 1, col=j % 2 + 1)
    for j, meds in enumerate(medians):
        pos = [m for m in meds if m > 0]
        use_log = log_x if log_x is not None else (len(pos) > 1 and max(pos) > 10 * min(pos))
        if use_log:
            fig.update_xaxes(type="log", row=j // 2 + 1, col=j % 2 + 1)
    fig.update_yaxes(title_text="fraction of requests", range=[0, 1.01])
    fig.update_layout(title="Latency CDFs", height=600, margin=dict(t=70, l=50, r=20, b=40))
    return fig


def _instances(res: Results):
    """(name, role, KV capacity pages, step columns) of every instance with steps: the record's
    arrays, never a long table (a long run has tens of millions of steps)."""
    rec = res.record
    for inst, steps in zip(rec.instances, rec.steps or []):
        if column_rows(steps):
            yield inst.name, inst.role, max(inst.kv_capacity_pages, 1), steps


def _parts(st, cols: tuple[str, ...]):
    """The step columns ``cols`` a part of the log at a time (the whole log when it is in
    memory; a spilled log is never read whole)."""
    rows = column_rows(st)
    size = PART_ROWS if isinstance(st, SpilledColumns) else max(rows, 1)
    for lo in range(0, rows, size):
        yield tuple(column_part(st, c, lo, lo + size) for c in cols)


def _span(res: Results) -> tuple[float, float]:
    """First and last step start over all instances (s)."""
    lo = [float(column_part(st, "time_s", 0, 1)[0]) for *_x, st in _instances(res)]
    hi = [float(column_part(st, "time_s", column_rows(st) - 1)[-1]) for *_x, st in _instances(res)]
    return (min(lo), max(hi)) if lo else (0.0, 0.0)


def _binned_max(t: np.ndarray, v: np.ndarray, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(bin start times, max of ``v`` per bin) over the bins that hold a step."""
    bins = len(edges) - 1
    idx = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, bins - 1)
    out = np.full(bins, -np.inf)
    np.maximum.at(out, idx, v)
    keep = np.isfinite(out)
    return edges[:-1][keep], out[keep]


def _binned_max_parts(st, col: str, cap: int | None, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """_binned_max of a step column (divided by ``cap`` when given), a part of the log at a time."""
    best = np.full(len(edges) - 1, -np.inf)
    for t, v in _parts(st, ("time_s", col)):
        x, y = _binned_max(t, (v / cap if cap is not None else v).astype(np.float64), edges)
        idx = np.searchsorted(edges, x, side="left")
        np.maximum.at(best, idx, y)
    keep = np.isfinite(best)
    return edges[:-1][keep], best[keep]


def throughput_timeline_figure(res: Results | RunSet, bins: int = 300) -> go.Figure:
    """Output tokens/s (decode) and prefill tokens/s over time, summed over instances."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("output tokens/s", "prefill tokens/s"))
    for k, (name, r) in enumerate(_runs(res).items()):
        insts = list(_instances(r))
        if not insts:
            continue
        t0, t1 = _span(r)
        edges = np.linspace(t0, t1 + 1e-9, bins + 1)
        width = edges[1] - edges[0]
        for j, col in enumerate(["running_batch", "prefill_tokens"]):
            h = np.zeros(bins)
            for *_x, st in insts:
                for t, w in _parts(st, ("time_s", col)):
                    h += np.histogram(t, bins=edges, weights=w)[0]
            fig.add_trace(go.Scatter(x=edges[:-1], y=h / width, mode="lines", name=name, legendgroup=name,
                                     showlegend=j == 0, line=dict(color=PALETTE[k % len(PALETTE)])), row=1, col=j + 1)
    fig.update_xaxes(title_text="time (s)")
    fig.update_layout(title="Throughput over time", height=350, margin=dict(t=70, l=50, r=20, b=40))
    return fig


def instance_timeline_figure(res: Results, bins: int = 300) -> go.Figure:
    """Per instance: queue depth, running batch and KV pool use over time (binned max)."""
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True,
                        subplot_titles=("queue depth (requests)", "running batch (requests)", "KV pool used (fraction)"))
    t0, t1 = _span(res)
    edges = np.linspace(t0, t1 + 1e-9, bins + 1)
    for k, (name, _role, cap, st) in enumerate(_instances(res)):
        for j, col in enumerate(["queue_depth", "running_batch", "kv_used"]):
            x, y = _binned_max_parts(st, col, cap if col == "kv_used" else None, edges)
            fig.add_trace(go.Scatter(x=x, y=y, mode="lines", name=name, legendgroup=name,
                                     showlegend=j == 0, line=dict(color=PALETTE[k % len(PALETTE)])), row=j + 1, col=1)
    fig.update_xaxes(title_text="time (s)", row=3, col=1)
    fig.update_layout(title="Instances over time", height=650, margin=dict(t=70, l=50, r=20, b=40))
    return fig


def has_links(res: Results) -> bool:
    """Whether the run moved KV over links (a disaggregated deployment that transferred)."""
    return bool(res.record.link_names) and len(res.record.link_usage.get("time_s", ())) > 0


def link_timeline_figure(res: Results, bins: int = 300) -> go.Figure:
    """Bandwidth in use per link (Gbit/s), time-weighted within each bin, with each link's
    capacity (one dotted line per distinct capacity, named with its links) so utilisation can
    be read off."""
    rec = res.record
    lu = rec.link_usage
    fig = go.Figure()
    if has_links(res):
        t_all = lu["time_s"]
        s0, s1 = _span(res)
        t0 = min(float(t_all.min()), s0) if len(t_all) else s0
        t_end = max(float(t_all.max()), s1)
        edges = np.linspace(t0, t_end + 1e-9, bins + 1)
        names = np.asarray(rec.link_names, dtype=object)
        order = np.argsort(lu["link"], kind="stable")  # each link's changes, in time order
        codes, starts = np.unique(lu["link"][order], return_index=True)
        shown_links = []
        for k, (code, lo, hi) in enumerate(zip(codes, starts, list(starts[1:]) + [len(order)])):
            sel = order[lo:hi]
            t = t_all[sel]
            rate = lu["bytes_per_s"][sel]
            # integrate the step function: bytes moved per bin / bin width
            cum = np.concatenate([[0.0], np.cumsum(rate[:-1] * np.diff(t))])
            moved = np.interp(edges, t, cum, left=0.0, right=cum[-1])
            gbps = np.diff(moved) / np.diff(edges) * 8 / 1e9
            name = str(names[code])
            shown_links.append(name)
            fig.add_trace(go.Scatter(x=edges[:-1], y=gbps, mode="lines", name=name,
                                     line=dict(color=PALETTE[k % len(PALETTE)])))
        caps: dict[float, list[str]] = {}
        for name in shown_links:
            cap = rec.link_capacity.get(name)
            if cap:
                caps.setdefault(round(float(cap) * 8 / 1e9, 3), []).append(name)
        for gbit, names_ in sorted(caps.items()):
            shown = ", ".join(names_[:4]) + (f" +{len(names_) - 4} more" if len(names_) > 4 else "")
            label = f"capacity {gbit:,.0f} Gbit/s ({shown})"
            fig.add_trace(go.Scatter(x=[t0, t_end], y=[gbit, gbit], mode="lines", name=label, legendgroup="capacity",
                                     line=dict(color="black", dash="dot", width=1.5),
                                     hovertemplate=label + "<extra></extra>"))
    fig.update_layout(title="KV transfer bandwidth per link (dotted: link capacity)", xaxis_title="time (s)",
                      yaxis_title="Gbit/s", height=350, margin=dict(t=60, l=50, r=20, b=40))
    fig.update_yaxes(rangemode="tozero")
    return fig


BREAKDOWN = [("queue_s", "queueing"), ("prefill_s", "prefill compute"), ("kv_load_s", "KV load"),
             ("transfer_wait_s", "wait for D KV room"), ("transfer_s", "KV transfer"),
             ("decode_wait_s", "D admission")]


def ttft_breakdown_figure(res: Results | RunSet) -> go.Figure:
    """Where TTFT goes: mean seconds per phase (stacked), per run."""
    fig = go.Figure()
    runs = _runs(res)
    names = list(runs)
    for j, (col, label) in enumerate(BREAKDOWN):
        vals = []
        for r in runs.values():
            df = r.requests[r.requests["finished"]]
            v = df[col].to_numpy(dtype=float) if col in df else np.array([np.nan])
            vals.append(float(np.nanmean(v)) * 1e3 if np.isfinite(v).any() else 0.0)
        fig.add_trace(go.Bar(x=names, y=vals, name=label, marker_color=PALETTE[j % len(PALETTE)]))
    fig.update_layout(barmode="stack", title="TTFT breakdown (mean ms per phase)", yaxis_title="ms",
                      height=350, margin=dict(t=60, l=50, r=20, b=40))
    return fig


GANTT_PHASES = [("queue", "arrival_s", "prefill_start_s", "#bbbbbb"),
                ("prefill", "prefill_start_s", "prefill_end_s", "#1f77b4"),
                ("wait+transfer", "prefill_end_s", "transfer_end_s", "#ff7f0e"),
                ("to first token", "transfer_end_s", "first_token_s", "#9467bd"),
                ("decode", "first_token_s", "finish_s", "#2ca02c")]


def request_gantt_figure(res: Results, n: int = 25, seed: int = 0,
                         window: tuple[float, float] | None = None) -> go.Figure:
    """The life of ``n`` sample requests: queue, prefill, transfer, decode as horizontal bars.
    ``window`` = (start s, end s) zooms to a time window: the sample is drawn among the
    requests alive in it (arrived before its end, finished after its start), so short phases
    such as prefill and transfer get visible width."""
    df = res.requests[res.requests["finished"]]
    alive = len(df)
    if window is not None:
        t0, t1 = float(min(window)), float(max(window))
        df = df[(df["arrival_s"] < t1) & (df["finish_s"] > t0)]
        alive = len(df)
    if len(df) > n:
        df = df.sample(n=n, random_state=seed)
    df = df.sort_values("arrival_s")
    fig = go.Figure()
    labels = [f"req {i}" for i in df["request_id"]]
    for name, a, b, color in GANTT_PHASES:
        start = df[a].to_numpy(dtype=float)
        end = df[b].to_numpy(dtype=float)
        dur = np.where(np.isfinite(start) & np.isfinite(end), end - start, 0.0)
        fig.add_trace(go.Bar(y=labels, x=np.clip(dur, 0, None), base=np.nan_to_num(start), orientation="h",
                             name=name, marker_color=color,
                             hovertemplate=name + ": %{x:.3f} s from %{base:.3f} s<extra></extra>"))
    what = f"{len(df)} of {alive} requests" + (f" alive in {t0:,.1f}-{t1:,.1f} s" if window is not None else "")
    fig.update_layout(barmode="overlay", title=f"Sample request lives ({what})", xaxis_title="time (s)",
                      height=max(300, 22 * len(df) + 100), margin=dict(t=60, l=80, r=20, b=40),
                      yaxis=dict(autorange="reversed"))
    if window is not None:
        fig.update_xaxes(range=[t0, t1])
    return fig


SUMMARY_ROWS = [
    ("completed", "completed requests", "{:.0f}"), ("dropped", "dropped requests", "{:.0f}"),
    ("request_throughput", "request throughput (req/s)", "{:.2f}"),
    ("input_throughput", "input tokens/s", "{:.0f}"), ("output_throughput", "output tokens/s", "{:.0f}"),
    ("output_throughput_per_node", "output tokens/s per node", "{:.0f}"),
    ("output_throughput_per_gpu", "output tokens/s per GPU", "{:.0f}"),
    ("goodput_share", "goodput share (meets SLO)", "{:.1%}"), ("request_goodput", "goodput (req/s)", "{:.2f}"),
    ("mean_ttft_ms", "mean TTFT (ms)", "{:.1f}"), ("median_ttft_ms", "median TTFT (ms)", "{:.1f}"),
    ("p90_ttft_ms", "p90 TTFT (ms)", "{:.1f}"), ("p99_ttft_ms", "p99 TTFT (ms)", "{:.1f}"),
    ("mean_itl_ms", "mean ITL (ms)", "{:.2f}"), ("p90_itl_ms", "p90 ITL (ms)", "{:.2f}"),
    ("p99_itl_ms", "p99 ITL (ms)", "{:.2f}"), ("mean_tpot_ms", "mean TPOT (ms)", "{:.2f}"),
    ("p99_tpot_ms", "p99 TPOT (ms)", "{:.2f}"), ("mean_e2e_latency_ms", "mean E2E (ms)", "{:.0f}"),
    ("p99_e2e_latency_ms", "p99 E2E (ms)", "{:.0f}"),
]


def summary_rows(summary: dict) -> list[tuple[str, str]]:
    """(label, formatted value) pairs for tables in the CLI, HTML report and dashboard, one per
    SUMMARY_ROWS entry in its order (the dashboard pairs them by position)."""
    rows = []
    for key, label, fmt in SUMMARY_ROWS:
        v = summary.get(key)
        if key.endswith("_per_node") and (summary.get("nodes") or 0) < 1:
            v = None  # a run on part of one node: per GPU is the figure (a per-node rate would extrapolate)
        rows.append((label, "n/a" if v is None else fmt.format(v)))
    return rows


PLOTLY_JS = "plotly.min.js"


def write_plotly_js(folder: str | Path) -> Path:
    """Write plotly.js (the bundle plotly.py ships) as ``folder/plotly.min.js`` unless the same
    bundle is there already, so every report in a folder loads one copy. Written to a temporary
    name and renamed, so reports written in parallel never see half a file."""
    import os
    import uuid

    from plotly.offline import get_plotlyjs

    js = get_plotlyjs().encode("utf-8")
    path = Path(folder) / PLOTLY_JS
    try:
        if path.stat().st_size == len(js) and path.read_bytes() == js:
            return path
    except OSError:
        pass
    tmp = path.with_name(f".{PLOTLY_JS}.{uuid.uuid4().hex}.tmp")  # open() honours the umask, as for the report
    try:
        with open(tmp, "wb") as f:
            f.write(js)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def plotly_script_tag(standalone: bool) -> str:
    """The <script> that loads plotly.js: inlined (``standalone``), else ``plotly.min.js`` from
    the page's folder."""
    if standalone:
        from plotly.offline import get_plotlyjs

        return f"<script type='text/javascript'>{get_plotlyjs()}</script>"
    return f"<script src='{PLOTLY_JS}' charset='utf-8'></script>"


MISSING_PLOTLY_NOTE = (
    "<script>if (typeof Plotly === 'undefined') {document.body.insertAdjacentHTML('afterbegin', "
    "'<p style=\"color:#b00020;font-weight:600\">" + PLOTLY_JS + " was not found next to this report, so its "
    "charts cannot be drawn: copy it along, or write a self-contained report (pdsim run --standalone-report).</p>')}"
    "</script>")


def report_html(res: Results, path: str | Path, standalone: bool = False, verdicts=None) -> None:
    """Write the HTML report of one run. By default the page loads ``plotly.min.js`` from its
    own folder (written there once, shared by every report in the folder: ~5 MB once instead of
    per report); ``standalone`` inlines plotly.js so the single file works anywhere offline.
    ``verdicts`` (metrics.detectors.diagnose): what limits the run, shown after the summary."""
    import html

    path = Path(path)
    s = res.summary()
    table = "".join(f"<tr><td>{html.escape(a)}</td><td style='text-align:right'>{html.escape(b)}</td></tr>"
                    for a, b in summary_rows(s))
    figs = [latency_cdf_figure(res), ttft_breakdown_figure(res), throughput_timeline_figure(res),
            instance_timeline_figure(res)]
    if has_links(res):
        figs.append(link_timeline_figure(res))
    if has_events(res):
        figs.append(events_figure(res))
    figs.append(request_gantt_figure(res))
    parts = [f.to_html(full_html=False, include_plotlyjs=False) for f in figs]
    if not standalone:
        write_plotly_js(path.parent)
    meta = res.record.meta
    title = html.escape(f"pdsim report: {res.name}")
    desc = html.escape(meta.get("description") or "")
    doc = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{title}</title>"
           "<style>body{font-family:sans-serif;margin:20px} table{border-collapse:collapse}"
           "td{padding:2px 12px;border-bottom:1px solid #ddd}</style>"
           f"{plotly_script_tag(standalone)}</head><body>"
           f"<h1>{title}</h1><p>{desc}</p><p>{s['gpus']} GPUs ({s['nodes']:g} nodes) on "
           f"{html.escape(str(meta.get('hardware', '?')))}, model {html.escape(str(meta.get('model', '?')))}; "
           f"simulated {s['sim_time_s']:.1f} s in {s['wall_s']:.2f} s wall.</p>"
           f"<table>{table}</table>" + (verdicts_html(verdicts, s) if verdicts is not None else "")
           + "".join(parts) + ("" if standalone else MISSING_PLOTLY_NOTE)
           + "</body></html>")
    with open(path, "w", encoding="utf-8") as f:
        f.write(doc)


def has_events(res: Results) -> bool:
    return bool(res.record.stats.get("events"))


EVENT_COLORS = {"failed": "#d62728", "detected": "#ff7f0e", "up": "#2ca02c", "restarting": "#bcbd22",
                "starting": "#17becf", "draining": "#9467bd", "removed": "#8c564b", "stalled": "#e377c2",
                "nic_failed": "#d62728", "nic_recovered": "#2ca02c"}


def events_figure(res: Results, bins: int = 300) -> go.Figure:
    """Capacity and throughput around the run's events (failures, detection, restarts, scaling):
    serving and allocated GPUs over time, output tokens/s, and one marker per event."""
    st = res.record.stats
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.45, 0.55], vertical_spacing=0.08,
                        subplot_titles=("GPUs serving / allocated", "output tokens/s"))
    end = res.record.end_s
    for key, name, dash in (("capacity_gpus", "serving", None), ("allocated_gpus", "allocated", "dot")):
        pts = st.get(key) or []
        if pts:
            t = [p[0] for p in pts] + [end]
            g = [p[1] for p in pts] + [pts[-1][1]]
            fig.add_trace(go.Scatter(x=t, y=g, mode="lines", line_shape="hv", name=f"GPUs {name}",
                                     line=dict(dash=dash)), row=1, col=1)
    decoding = [st for _n, role, _c, st in _instances(res) if role != "prefill"]
    if decoding:
        edges = np.linspace(0.0, max(end, 1e-6), bins + 1)
        h = sum(np.histogram(t, bins=edges, weights=w)[0] for st in decoding
                for t, w in _parts(st, ("time_s", "running_batch")))
        fig.add_trace(go.Scatter(x=edges[:-1], y=h / (edges[1] - edges[0]), mode="lines", name="output tokens/s",
                                 line=dict(color="#444")), row=2, col=1)
    for kind in dict.fromkeys(e["kind"] for e in st.get("events", [])):
        evs = [e for e in st["events"] if e["kind"] == kind]
        fig.add_trace(go.Scatter(x=[e["time_s"] for e in evs], y=[0] * len(evs), mode="markers",
                                 marker=dict(symbol="triangle-up", size=11, color=EVENT_COLORS.get(kind, "#333")),
                                 name=kind, text=[f"{e['what']}: {e['detail']}" for e in evs],
                                 hovertemplate="%{x:.1f} s: %{text}<extra>" + kind + "</extra>"), row=2, col=1)
    fig.update_xaxes(title_text="time (s)", row=2, col=1)
    fig.update_yaxes(title_text="GPUs", row=1, col=1)
    fig.update_yaxes(title_text="tokens/s", row=2, col=1)
    fig.update_layout(title="Events, capacity and throughput", height=520, margin=dict(t=70, l=60, r=20, b=40))
    return fig
