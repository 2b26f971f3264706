"""Figures and tables of sweep and compare results (shared by ``pdsim sweep``'s report.html,
``pdsim compare`` and the dashboard): Pareto scatter with knob hovers, heatmap over two knobs
(P x D layouts by default), goodput vs TTFT, side-by-side comparison bars, formatted tables.

Every builder takes a results table (one row per configuration, as in results.csv);
``customdata`` carries the config id so the dashboard can load a clicked point's scenario.
Where the table has them (sweeps since issue 16), ``meets_slo`` and ``workload_group``
(pdsim/explore/select.py) decide what competes: frontiers are drawn per workload group and
configurations that miss the SLO are drawn hollow and grey, never on a frontier.
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


PALETTE = ["#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]


def _groups(df: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(df["workload_group"].fillna(""))) if "workload_group" in df else [""]


def pareto_figure(df: pd.DataFrame, frontier: pd.DataFrame | None = None, knobs: list[str] | None = None,
                  x: str = "output_throughput_per_gpu", y: str = "tokens_per_s_per_user",
                  maximize: tuple[bool, bool] = (True, True)) -> go.Figure:
    """Feasible configurations in (x, y) coloured by goodput share; the non-dominated ones
    joined, one line per workload group. ``frontier`` defaults to the rows ``df`` marks
    (``pareto`` column) or none. Configurations that miss the SLO are hollow grey circles."""
    knobs = default_knobs(df) if knobs is None else knobs
    ok = _ok(df).dropna(subset=[c for c in (x, y) if c in df])
    if frontier is None:
        frontier = ok[ok["pareto"].astype(bool)] if "pareto" in ok and (x, y) == (
            "output_throughput_per_gpu", "tokens_per_s_per_user") else ok.iloc[0:0]
    metrics = (x, y, "goodput_share", "request_goodput", "p90_ttft_ms", "p90_itl_ms", "max_rate")
    fig = go.Figure()
    meets = ok["meets_slo"].astype(bool) if "meets_slo" in ok else pd.Series(True, index=ok.index)
    good, bad = ok[meets], ok[~meets]
    color = good["goodput_share"] if "goodput_share" in good else None
    fig.add_trace(go.Scatter(
        x=good[x], y=good[y], mode="markers", name="meets the SLO" if len(bad) else "configurations",
        text=_hover(good, knobs, metrics), hoverinfo="text",
        customdata=good["config_id"] if "config_id" in good else None,
        marker=dict(size=9, color=color, colorscale="Viridis", cmin=0, cmax=1, showscale=color is not None,
                    colorbar=dict(title="goodput<br>share", x=1.02), line=dict(width=0.5, color="#333"))))
    if len(bad):
        fig.add_trace(go.Scatter(
            x=bad[x], y=bad[y], mode="markers", name="misses the SLO (not on a frontier)",
            text=_hover(bad, knobs, metrics), hoverinfo="text",
            customdata=bad["config_id"] if "config_id" in bad else None,
            marker=dict(size=8, color="rgba(0,0,0,0)", line=dict(width=1, color="#999"))))
    if len(frontier):
        groups = _groups(frontier)
        for k, g in enumerate(groups):
            fr = frontier[frontier["workload_group"].fillna("") == g] if "workload_group" in frontier else frontier
            fr = fr.sort_values(x)
            name = "Pareto frontier" + (f": {g}" if g else "")
            c = PALETTE[k % len(PALETTE)]
            fig.add_trace(go.Scatter(x=fr[x], y=fr[y], mode="lines+markers", name=name,
                                     line=dict(color=c, width=2), marker=dict(color=c, size=11, symbol="diamond-open"),
                                     text=_hover(fr, knobs, metrics), hoverinfo="text",
                                     customdata=fr["config_id"] if "config_id" in fr else None))
    names = {"output_throughput_per_gpu": "output tokens/s per GPU",
             "tokens_per_s_per_user": "output tokens/s per user (1000 / mean TPOT ms)",
             "request_goodput": "goodput (req/s meeting the SLO)", "p90_ttft_ms": "p90 TTFT (ms)"}
    title = f"Pareto frontier: {names.get(x, x)} vs {names.get(y, y)}"
    if "max_rate" in ok and ok["max_rate"].notna().any():
        title += " (each configuration at its maximum sustainable rate)"
    elif len(_groups(ok)) > 1:
        title += " (one frontier per workload)"
    fig.update_layout(title=title, xaxis_title=names.get(x, x), yaxis_title=names.get(y, y), height=480,
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


def heatmap_figure(df: pd.DataFrame, x: str, y: str, metric: str, agg: str = "max",
                   subtitle: str = "") -> go.Figure:
    """``metric`` over two knobs (e.g. prefill_layout x decode_layout); where other knobs vary,
    each cell shows the best (``agg`` max or min) and hovers its config id. Only configurations
    that meet the SLO compete for a cell when the table marks them (``meets_slo``); a cell whose
    configurations all miss it reads "misses SLO"."""
    ok = _ok(df).dropna(subset=[metric])
    fig = go.Figure()
    if ok.empty:
        fig.update_layout(title=f"{metric}: no feasible configuration")
        return fig
    xs, ys = _order(ok[x]), _order(ok[y])
    slo = "meets_slo" in ok
    comp = ok[ok["meets_slo"].astype(bool)] if slo else ok
    z = [[None] * len(xs) for _ in ys]
    ids = [[""] * len(xs) for _ in ys]
    text = [[""] * len(xs) for _ in ys]
    if slo:
        for _i, r in ok.drop_duplicates([y, x]).iterrows():
            text[ys.index(r[y])][xs.index(r[x])] = "misses SLO"
    if len(comp):
        pick = comp.groupby([y, x], sort=False)[metric]
        best = comp.loc[(pick.idxmax() if agg == "max" else pick.idxmin()).values]
        for _i, r in best.iterrows():
            yi, xi = ys.index(r[y]), xs.index(r[x])
            z[yi][xi] = float(r[metric])
            ids[yi][xi] = str(r.get("config_id", ""))
            text[yi][xi] = _fmt(z[yi][xi])
    fig.add_trace(go.Heatmap(z=z, x=[str(v) for v in xs], y=[str(v) for v in ys], colorscale="Viridis",
                             colorbar=dict(title=metric), text=text, texttemplate="%{text}", customdata=ids,
                             hovertemplate=f"{x} = %{{x}}<br>{y} = %{{y}}<br>{metric} = %{{z:.4g}}"
                                           "<br>config %{customdata}<extra></extra>"))
    among = " among configurations meeting the SLO" if slo else ""
    title = f"{metric} ({agg} over other knobs{among}) by {short_name(x)} x {short_name(y)}"
    fig.update_layout(title=title + (f"<br><sub>{html.escape(subtitle)}</sub>" if subtitle else ""),
                      xaxis_title=short_name(x), yaxis_title=short_name(y),
                      height=max(360, 60 * len(ys) + 160), xaxis=dict(type="category"),
                      yaxis=dict(type="category"))
    return fig


COMPARE_PANELS = [("output_throughput_per_gpu", "output tokens/s per GPU"), ("goodput_share", "goodput share"),
                  ("p90_ttft_ms", "p90 TTFT (ms)"), ("p90_itl_ms", "p90 ITL (ms)"),
                  ("mean_tpot_ms", "mean TPOT (ms)")]


def compare_figure(df: pd.DataFrame, label: str = "scenario") -> go.Figure:
    """One bar per scenario in each panel: throughput per GPU, goodput share, latencies. A
    latency panel whose values differ more than 10x between scenarios uses a log axis, so a
    120 ms run stays visible beside a 35 s one."""
    panels = [(m, t) for m, t in COMPARE_PANELS if m in df]
    fig = make_subplots(rows=1, cols=max(len(panels), 1), subplot_titles=[t for _m, t in panels])
    colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]
    names = df[label].astype(str).tolist()
    for c, (m, _t) in enumerate(panels, start=1):
        fig.add_trace(go.Bar(x=names, y=df[m], marker_color=[colors[i % len(colors)] for i in range(len(df))],
                             text=[_fmt(v) for v in df[m]], textposition="auto", showlegend=False,
                             hovertemplate="%{x}<br>" + m + " = %{y:.4g}<extra></extra>"), row=1, col=c)
        if m.endswith("_ms") and spread(df[m]) > 10:
            fig.update_yaxes(type="log", row=1, col=c)
    fig.update_layout(title="Side by side", height=420, margin=dict(t=80))
    fig.update_xaxes(tickangle=-30)
    return fig


def spread(values) -> float:
    """max / min of the positive finite values (1 when fewer than two)."""
    v = pd.to_numeric(pd.Series(list(values)), errors="coerce")
    v = v[(v > 0) & v.notna() & (v != float("inf"))]
    return float(v.max() / v.min()) if len(v) >= 2 else 1.0


def log_axes_where_runs_differ(fig: go.Figure, ratio: float = 10.0) -> go.Figure:
    """Switch each x axis of a CDF figure (one trace per run and panel) to log when the runs'
    medians on it differ by more than ``ratio``: on a linear axis the faster run is a vertical
    line at 0."""
    medians: dict[str, list[float]] = {}
    for tr in fig.data:
        xs = pd.to_numeric(pd.Series(list(tr.x if tr.x is not None else [])), errors="coerce").dropna()
        xs = xs[xs > 0]
        if len(xs):
            medians.setdefault(tr.xaxis or "x", []).append(float(xs.median()))
    for axis, ms in medians.items():
        if len(ms) >= 2 and max(ms) / min(ms) > ratio:
            fig.update_layout({"xaxis" + axis[1:]: dict(type="log")})
    return fig


def heatmap_axes(df: pd.DataFrame, knobs: list[str], candidates: list[str] | None = None) -> tuple[str, str] | None:
    """The two columns a sweep's heatmap spans by default: two varying columns that are crossed
    (every value of one appears with every value of the other), never two that move together
    (``prefill.nodes`` and ``prefill.dp`` of one linked axis give a diagonal). P x D layouts
    come first when both vary; then ``candidates`` (one column per sweep axis), else ``knobs``."""
    cols = ["prefill_layout", "decode_layout"] + [c for c in (candidates or knobs) if c not in
                                                  ("prefill_layout", "decode_layout")]
    cols = [c for c in cols if c in df and df[c].notna().all() and df[c].astype(str).nunique() > 1]
    best, best_fill = None, 0.0
    for i, a in enumerate(cols):
        for b in cols[i + 1:]:
            pairs = df[[a, b]].astype(str).drop_duplicates().shape[0]
            fill = pairs / (df[a].astype(str).nunique() * df[b].astype(str).nunique())
            linked = pairs == max(df[a].astype(str).nunique(), df[b].astype(str).nunique())
            if not linked and fill > best_fill + 1e-9:
                best, best_fill = (a, b), fill
    return best


def _number(v, kind: str) -> str:
    """A cell of a results table: units in the header, values formatted for reading."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)) or (isinstance(v, str) and not v):
        return "–"
    if isinstance(v, (bool,)) or kind == "bool":
        return "yes" if bool(v) else "no"
    if kind == "text" or not isinstance(v, (int, float)):
        return html.escape(str(v))
    if kind == "pct":
        return f"{100 * v:.1f} %"
    if kind == "int" or (isinstance(v, int) and abs(v) >= 1):
        return f"{v:,.0f}"
    a = abs(v)
    if a >= 100:
        return f"{v:,.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a >= 0.1 or a == 0:
        return f"{v:.2f}"
    return f"{v:.3g}"


# (column, header with unit, kind) of the tables in report.html and compare.html
TABLE_COLUMNS = [
    ("scenario", "scenario", "text"), ("config_id", "config", "text"), ("layout", "layout", "text"),
    ("gpus", "GPUs", "int"), ("status", "status", "text"), ("meets_slo", "meets SLO", "bool"),
    ("workload_group", "workload", "text"), ("request_throughput", "req/s", "num"),
    ("goodput_share", "goodput", "pct"), ("request_goodput", "goodput (req/s)", "num"),
    ("output_throughput_per_gpu", "output tok/s per GPU", "num"), ("tokens_per_s_per_user", "tok/s per user", "num"),
    ("median_ttft_ms", "TTFT p50 (ms)", "num"), ("p90_ttft_ms", "TTFT p90 (ms)", "num"),
    ("p99_ttft_ms", "TTFT p99 (ms)", "num"), ("median_itl_ms", "ITL p50 (ms)", "num"),
    ("p90_itl_ms", "ITL p90 (ms)", "num"), ("mean_tpot_ms", "TPOT mean (ms)", "num"),
    ("mean_e2e_latency_ms", "E2E mean (ms)", "num"), ("max_rate", "max rate (req/s)", "num"),
    ("max_rate_per_gpu", "max rate per GPU", "num"), ("dropped", "dropped", "int"), ("pareto", "on frontier", "bool"),
    ("reason", "why not simulated", "text"),
]


def html_table(df: pd.DataFrame, knobs: list[str] | None = None, first: tuple[str, ...] = ()) -> str:
    """A readable HTML table of results: units in the headers, numbers rounded for reading,
    "–" for what is missing (never "None" or NaN), knob columns by their short names."""
    kinds = {c: (h, k) for c, h, k in TABLE_COLUMNS}
    cols = [c for c in first if c in df] + [k for k in (knobs or []) if k in df and k not in first]
    cols += [c for c, _h, _k in TABLE_COLUMNS if c in df and c not in cols and df[c].notna().any()
             and not (c == "workload_group" and not df[c].astype(bool).any())]
    head = "".join(f"<th>{html.escape(kinds.get(c, (short_name(c), ''))[0])}</th>" for c in cols)
    body = []
    for _i, r in df.iterrows():
        cells = []
        for c in cols:
            kind = kinds.get(c, ("", "knob"))[1]
            v = r[c]
            v = v.item() if hasattr(v, "item") else v
            text = _number(v, "text" if kind == "knob" and not isinstance(v, (int, float)) else kind)
            cls = ' class="num"' if kind in ("num", "int", "pct") or (kind == "knob" and isinstance(v, (int, float))) \
                else ' class="wrap"' if c == "reason" else ""
            cells.append(f"<td{cls}>{text}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table class='results'><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


TABLE_CSS = ("table.results{border-collapse:collapse;font-size:13px} table.results td,table.results th"
             "{padding:3px 8px;border-bottom:1px solid #ddd;white-space:nowrap} table.results th{text-align:left;"
             "background:#f0f0f0;position:sticky;top:0} table.results td.num{text-align:right;"
             "font-variant-numeric:tabular-nums} table.results td.wrap{white-space:normal;min-width:24em;max-width:48em} "
             ".scroll{overflow-x:auto;max-width:100%}")


def _heatmaps(df: pd.DataFrame, knobs: list[str], metric: str, pair: tuple[str, str] | None,
              summary: dict | None) -> list[go.Figure]:
    """One heatmap per workload group (offered rates are never maxed over together)."""
    if pair is None:
        cands = [a.get("column") or a["fields"][0] for a in (summary or {}).get("axes", [])
                 if not all(f.startswith("workload.") for f in a["fields"])]
        pair = heatmap_axes(df, knobs, cands or None)
    if pair is None:
        return []
    # a workload knob on an axis is compared across its cells, not maxed over: no split then
    groups = [""] if any(str(c).startswith("workload.") for c in pair) else _groups(df)
    figs = []
    for g in groups[:MAX_HEATMAPS]:
        part = df[df["workload_group"].fillna("") == g] if "workload_group" in df and g else df
        if pair[0] in part and pair[1] in part:
            figs.append(heatmap_figure(part, pair[0], pair[1], metric, subtitle=g))
    return figs


MAX_HEATMAPS = 6  # workload groups drawn as heatmaps in report.html (all of them are in the table)


def sweep_report(df: pd.DataFrame, frontier: pd.DataFrame, knobs: list[str], path: str, title: str = "sweep",
                 summary: dict | None = None, heatmap: tuple[str, str] | None = None,
                 heatmap_metric: str | None = None) -> None:
    """A self-contained HTML report (plotly.js inlined, opens offline). ``heatmap``: its two
    columns (default: see heatmap_axes); ``heatmap_metric``: its colour (default max rate per
    GPU in a max-rate sweep, else goodput in req/s)."""
    metric = heatmap_metric or ("max_rate_per_gpu" if "max_rate_per_gpu" in df and df["max_rate_per_gpu"].notna().any()
                                else "request_goodput")
    figs = _heatmaps(df, knobs, metric, heatmap, summary) + [pareto_figure(df, frontier, knobs),
                                                             goodput_ttft_figure(df, knobs)]
    parts = "".join(f.to_html(full_html=False, include_plotlyjs=(i == 0)) for i, f in enumerate(figs))
    best = ""
    if summary and summary.get("best"):
        items = "".join(f"<tr><td>{html.escape(k)}</td><td class='num'>{_number(b['value'], 'num')}</td>"
                        f"<td>{html.escape(b['config_id'])}</td><td>{html.escape(str(b.get('layout') or ''))}</td><td class='wrap'>"
                        + html.escape(", ".join(f"{short_name(kk)}={vv}" for kk, vv in b["knobs"].items()))
                        + "</td></tr>"
                        for k, b in summary["best"].items())
        best = ("<h2>Best configuration per objective</h2><p>Among configurations that meet the SLO"
                + (", per workload" if summary.get("workload_groups") else "") + ".</p><table class='results'>"
                "<tr><th>objective</th><th>value</th><th>config</th><th>layout</th><th>knobs</th></tr>"
                f"{items}</table>")
    table = html_table(df, knobs, first=("config_id",))
    counts = ""
    if summary:
        tgt = summary.get("target") or {}
        parts_t = ([f"goodput share >= {tgt['target_goodput']:g}"] if tgt.get("target_goodput") is not None else []) \
            + [f"{k} <= {v:g}" for k, v in (tgt.get("limits") or {}).items()]
        target = f" Target (the SLO a configuration must meet): {html.escape(', '.join(parts_t))}." if parts_t else ""
        counts = (f"<p>{summary.get('configurations', len(df))} configurations: {summary.get('ok', '?')} simulated "
                  f"({summary.get('meets_slo', '?')} meet the SLO), {summary.get('infeasible', 0)} infeasible, "
                  f"{summary.get('errors', 0)} errors. Search: {html.escape(str(summary.get('mode', '')))}."
                  f"{target}</p>")
    with open(path, "w") as f:
        f.write(f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
                f"<style>body{{font-family:sans-serif;margin:20px}} {TABLE_CSS}</style></head><body>"
                f"<h1>pdsim sweep: {html.escape(title)}</h1>{counts}{best}{parts}"
                f"<h2>All configurations</h2><div class='scroll'>{table}</div></body></html>")
