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


def instance_table(summary: dict) -> html.Table:
    rows = summary.get("instances") or []
    head = html.Tr([html.Th(h) for h in ("instance", "role", "GPUs", "busy", "KV peak", "steps", "tokens out",
                                         "retractions")])
    body = [html.Tr([html.Td(r["name"]), html.Td(r["role"]), html.Td(r["gpus"]), html.Td(f"{r['busy_frac']:.0%}"),
                     html.Td(f"{r['kv_peak_frac']:.0%}"), html.Td(f"{r['steps']:,}"), html.Td(f"{r['tokens_out']:,}"),
                     html.Td(r["retractions"])]) for r in rows[:64]]
    more = [html.Tr(html.Td(f"... {len(rows) - 64} more", colSpan=8))] if len(rows) > 64 else []
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


SWEEP_COLUMNS = ("gpus", "status", "goodput_share", "request_goodput", "output_throughput_per_gpu",
                 "tokens_per_s_per_user", "p90_ttft_ms", "p90_itl_ms", "max_rate", "max_rate_per_gpu", "reason")


def _cell(v) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return ""
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def sweep_table(sweep, metric: str | None, limit: int = 200) -> html.Div:
    """Configurations, best ``metric`` first, each with a button that loads it into Build."""
    df = sweep.df
    cols = [c for c in ("layout",) if c in df] + sweep.knobs + [c for c in SWEEP_COLUMNS if c in df]
    cols = list(dict.fromkeys(cols))
    if metric in df:
        df = df.sort_values(metric, ascending=metric.endswith("_ms"), na_position="last")
    head = html.Tr([html.Th(""), html.Th("config")] + [html.Th(short_name(c)) for c in cols])
    body = [html.Tr([html.Td(html.Button("load", id={"type": "load-cfg", "id": str(r["config_id"])}, className="load")),
                     html.Td(str(r["config_id"]))] + [html.Td(_cell(r[c])) for c in cols])
            for r in df.head(limit).to_dict("records")]
    note = f"sorted by {metric}" + (f"; first {limit} of {len(df)}" if len(df) > limit else "") if metric else ""
    return html.Div([html.Div(note, className="hint"), html.Table([html.Thead(head), html.Tbody(body)],
                                                                  className="table")], style={"overflowX": "auto"})
