"""HTML pieces of the results views: empty states, summary cards against the SLO, per-instance
table and the side-by-side comparison table. Values and labels come from
pdsim.report.figures.summary_rows (the same rows as the CLI's table and the HTML report)."""
from __future__ import annotations

from dash import html

from pdsim.report.figures import SUMMARY_ROWS, summary_rows

NO_RUN = [html.B("No run yet. "), "Build a scenario on the Build tab and press Run ▶. Its summary cards, the "
          "latency CDFs against the SLO, where TTFT goes, throughput and instance timelines, KV transfer links "
          "and sample request lives appear here."]
NO_PINS = [html.B("Nothing to compare yet. "), "Run scenarios, press Pin to Compare on Run & see (or pick runs "
           "above), and their latency CDFs, TTFT breakdowns, throughput and a numbers table are overlaid here."]


def empty_state(children, eid: str | None = None) -> html.Div:
    """A visible placeholder (never empty axes) saying what will appear and how to get it."""
    return html.Div(children, className="empty", **({"id": eid} if eid else {}))


def running_state(label: str) -> html.Div:
    return empty_state([html.B(f"Running {label}. "), "Its results appear here when it finishes; the progress is "
                        "shown above, and Cancel stops it."], "run-pending")


# summary key fragment -> the SLO bound it is judged against
_SLO_OF = {"ttft": "ttft_ms", "itl": "itl_ms", "tpot": "tpot_ms", "e2e": "e2e_ms"}
HEADLINE = ("goodput_share", "request_goodput", "output_throughput", "output_throughput_per_node",
            "request_throughput", "completed", "dropped")


def _bound(key: str, slo: dict) -> float | None:
    if "_itl" in key and key.startswith(("p90", "p99")):
        return slo.get("max_itl_ms")  # tail gaps against the worst-gap bound; itl_ms bounds a request's mean gap
    for frag, name in _SLO_OF.items():
        if f"_{frag}" in key:
            return slo.get(name)
    return None


def layout_text(resolved) -> str:
    """e.g. '2 x prefill (2 nodes, tp16 dp16 ep16) + 1 x decode (6 nodes, ...)'."""
    gpn = resolved.hardware.gpus_per_node
    parts = []
    for role, _i, g in resolved.scenario.cluster.groups():
        size = f"{g.nodes} node{'s' * (g.nodes > 1)}" if g.nodes is not None else f"{g.gpus} GPU{'s' * (g.gpus > 1)}"
        par = f"tp{g.world(gpn)}" + (f" dp{g.dp}" if g.dp > 1 else "") + (f" ep{g.ep}" if g.ep > 1 else "")
        parts.append(f"{g.count} x {role} ({size}, {par})")
    return " + ".join(parts)


def layout_code(resolved) -> str:
    """Compact layout, e.g. 'P2x2n D1x6n' or 'C4x2g' (count x instance size)."""
    out = []
    for role, _i, g in resolved.scenario.cluster.groups():
        size = f"{g.nodes}n" if g.nodes is not None else f"{g.gpus}g"
        out.append(f"{role[0].upper()}{g.count}x{size}")
    return " ".join(out)


def run_header(res) -> html.Div:
    s = res.summary()
    sc = res.scenario
    return html.Div([
        html.B(sc.name), f": {layout_text(sc)}; {s['gpus']} GPUs ({s['nodes']:g} nodes) of {sc.hardware.name}, "
        f"model {sc.model.name}; simulated {s['sim_time_s']:,.1f} s in {s['wall_s']:.2f} s wall."],
        className="run-header")


def slo_banner(summary: dict) -> html.Div:
    slo = summary.get("slo") or {}
    bounds = ", ".join(f"{k.replace('_ms', '').upper()} <= {v:g} ms" for k, v in slo.items() if v)
    share = summary.get("goodput_share")
    ok = share is not None and share >= 0.9
    text = (f"{share:.1%} of requests meet the SLO ({bounds or 'no bounds set'}); "
            f"goodput {summary.get('request_goodput', 0):.2f} req/s") if share is not None else "no goodput"
    return html.Div(text, className="banner " + ("good" if ok else "bad"))


def summary_cards(summary: dict, label: str = "") -> list:
    """One card per summary row; ``label`` (the run's name) is written on each card's tooltip
    and above the cards by the caller."""
    slo = summary.get("slo") or {}
    cards, run_label = [], label
    for (key, _label, _fmt), (label, value) in zip(SUMMARY_ROWS, summary_rows(summary)):
        bound = _bound(key, slo)
        v = summary.get(key)
        cls, note = "card", ""
        if bound and v is not None:
            cls += " good" if v <= bound else " bad"
            note = f"SLO {bound:g}"
        elif key in HEADLINE:
            cls += " headline"
        cards.append(html.Div([html.Div(label, className="card-label"), html.Div(value, className="card-value"),
                               html.Div(note, className="card-note")], className=cls, title=run_label))
    return cards


def instance_table(summary: dict, kv: list | None = None) -> html.Table:
    """Per instance; ``kv`` (run_figures.kv_use) splits the KV pool's peak into live KV (held by
    running requests) and prefix-cache residency (reusable blocks no request references)."""
    rows = summary.get("instances") or []
    by_name = {k.name: k for k in kv or []}
    head = html.Tr([html.Th(h) for h in ("instance", "role", "GPUs", "busy", "KV pool peak", "live KV peak",
                                         "prefix cache at pool peak", "steps", "tokens out", "retractions")])

    def pct(name, attr):
        k = by_name.get(name)
        return f"{getattr(k, attr):.0%}" if k is not None else ""

    body = [html.Tr([html.Td(r["name"]), html.Td(r["role"]), html.Td(r["gpus"]), html.Td(f"{r['busy_frac']:.0%}"),
                     html.Td(f"{r['kv_peak_frac']:.0%}"), html.Td(pct(r["name"], "live_peak")),
                     html.Td(pct(r["name"], "cached_at_peak")), html.Td(f"{r['steps']:,}"),
                     html.Td(f"{r['tokens_out']:,}"), html.Td(r["retractions"])]) for r in rows[:64]]
    more = [html.Tr(html.Td(f"... {len(rows) - 64} more", colSpan=10))] if len(rows) > 64 else []
    return html.Table([html.Thead(head), html.Tbody(body + more)], className="table")


def compare_table(runs: dict) -> html.Table:
    """Rows: summary metrics; columns: runs."""
    summaries = {name: r.summary() for name, r in runs.items()}
    head = html.Tr([html.Th("metric")] + [html.Th(n) for n in summaries])
    rows = []
    per_run = {n: dict(summary_rows(s)) for n, s in summaries.items()}
    for _key, label, _fmt in SUMMARY_ROWS:
        rows.append(html.Tr([html.Td(label)] + [html.Td(per_run[n].get(label, "")) for n in summaries]))
    rows.insert(0, html.Tr([html.Td("GPUs (nodes)")] + [html.Td(f"{s['gpus']} ({s['nodes']:g})")
                                                        for s in summaries.values()]))
    return html.Table([html.Thead(head), html.Tbody(rows)], className="table")


def short_name(knob: str) -> str:
    """A knob column's short label (pdsim.report.sweep_figures.short_name where available)."""
    try:
        from pdsim.report.sweep_figures import short_name as short
    except ImportError:
        return knob.replace("cluster.", "").replace("engine.", "")
    return short(knob)


# metrics first (what a reader compares), then the knobs, then bookkeeping; the hash id last
SWEEP_METRICS = ("goodput_share", "request_goodput", "output_throughput_per_gpu", "tokens_per_s_per_user",
                 "p90_ttft_ms", "p90_itl_ms", "max_rate", "max_rate_per_gpu")
SWEEP_TAIL = ("gpus", "status", "reason")
SWEEP_LABELS = {"goodput_share": "meets SLO", "request_goodput": "goodput req/s",
                "output_throughput_per_gpu": "tok/s/GPU", "tokens_per_s_per_user": "tok/s/user",
                "p90_ttft_ms": "p90 TTFT ms", "p90_itl_ms": "p90 ITL ms", "max_rate": "max rate",
                "max_rate_per_gpu": "max rate/GPU", "gpus": "GPUs", "status": "status", "reason": "reason",
                "layout": "layout", "config_id": "config"}
LOAD = "load"  # the column whose cell loads its row into Build


def _cell(v):
    if v is None or (isinstance(v, float) and v != v):
        return None
    if isinstance(v, float):
        return float(f"{v:.4g}")
    return v.item() if hasattr(v, "item") else v


def sweep_columns(sweep) -> list[str]:
    df = sweep.df
    cols = ([c for c in ("layout",) if c in df] + [c for c in SWEEP_METRICS if c in df]
            + [k for k in sweep.knobs if k != "layout"] + [c for c in SWEEP_TAIL if c in df] + ["config_id"])
    return list(dict.fromkeys(cols))


def sweep_rows(sweep, metric: str | None) -> tuple[list[dict], list[dict], list[dict], str]:
    """(columns, rows, tooltips, note) of the sweep grid: best ``metric`` first, metrics before
    knobs, the hash id last; every row's ``id`` is its configuration id."""
    df = sweep.df
    if metric in df:
        df = df.sort_values(metric, ascending=metric.endswith("_ms"), na_position="last")
    cols = sweep_columns(sweep)
    ids = {c: f"c{i}" for i, c in enumerate(cols)}
    columns = [{"name": "", "id": LOAD}] + [
        {"name": SWEEP_LABELS.get(c) or short_name(c), "id": ids[c],
         "type": "numeric" if df[c].dtype.kind in "if" else "text"} for c in cols]
    data = [{"id": str(r["config_id"]), LOAD: "load ▸", **{ids[c]: _cell(r[c]) for c in cols}}
            for r in df.to_dict("records")]
    tips = [{ids[c]: {"value": f"{short_name(c)}: {r[ids[c]]}", "type": "text"} for c in cols if r[ids[c]] is not None}
            for r in data]
    note = (f"{len(df)} configurations" + (f", sorted by {metric}" if metric else "")
            + "; click a column name to sort, type in the row under it to filter (e.g. > 0.9), "
              "click load ▸ to load that configuration into Build")
    return columns, data, tips, note


def sweep_grid(page_size: int = 15):
    """The sweep's configurations as a compact DataTable (filled by the Explore callbacks):
    fixed-width columns (long text cut, whole in the tooltip), horizontal scroll inside its box,
    native sort and filter, ``page_size`` rows a page. Clicking a row's "load ▸" cell loads
    that configuration into Build."""
    import warnings

    from dash import dash_table

    with warnings.catch_warnings():  # dash 3 says DataTable will move out of dash some day (to dash-ag-grid)
        warnings.simplefilter("ignore", DeprecationWarning)
        return _grid(dash_table, page_size)


def _grid(dash_table, page_size: int):
    return dash_table.DataTable(
        id="x-grid", columns=[], data=[], sort_action="native", filter_action="native",
        page_action="native", page_size=page_size, tooltip_data=[], tooltip_duration=None,
        style_table={"overflowX": "auto", "maxWidth": "100%"},
        style_cell={"width": "96px", "minWidth": "96px", "maxWidth": "96px", "overflow": "hidden",
                    "textOverflow": "ellipsis", "whiteSpace": "nowrap", "fontSize": "12px",
                    "fontFamily": "system-ui, sans-serif", "padding": "2px 6px"},
        style_cell_conditional=[{"if": {"column_id": LOAD}, "width": "52px", "minWidth": "52px", "maxWidth": "52px",
                                 "color": "#1f6feb", "cursor": "pointer", "textAlign": "center"}],
        style_header={"fontWeight": 600, "whiteSpace": "normal", "height": "auto", "lineHeight": "14px"})
