"""The results panel of Run & see: an ordered list of named sections, each built from one
finished run. A new kind of result (a verdict on what limits the run, fault events, ...) is one
more ``Section`` in ``RUN_SECTIONS``; the callbacks render whatever the list holds.

Sections appear in the page as ``<section id="res-<key>">`` with an optional title; a builder
returns None to leave its section out (e.g. links in a colocated run are replaced by a note).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from dash import dcc, html

from pdsim.metrics.results import Results
from pdsim.report.figures import (events_figure, has_events, has_links, instance_timeline_figure, latency_cdf_figure, link_timeline_figure,
                                  request_gantt_figure, throughput_timeline_figure, ttft_breakdown_figure)

from . import views
from .run_figures import kv_memory_figure, kv_use, link_util_figure


@dataclass(frozen=True)
class RunView:
    """What a section builder gets: the run, its summary (computed once) and its label."""

    res: Results
    summary: dict
    label: str
    before: Results | None = None  # the run a suggestion was applied to (Before / after section)
    applied: dict | None = None  # what was applied: {"action": ..., "overrides": [...], "base_label": ...}


@dataclass(frozen=True)
class Section:
    key: str
    title: Callable[[RunView], str] | str | None
    build: Callable[[RunView], Any]


def _summary(v: RunView):
    return html.Div(views.summary_cards(v.summary, v.label), id="cards", className="cards")


_SEVERITY_COLOURS = {"high": "#b00020", "medium": "#b26a00", "info": "#1b7a1b"}


def _verdicts(v: RunView):
    """What limits the run (metrics/detectors.py), without re-simulating the suggestions: the
    page must stay responsive; `pdsim run` checks them."""
    from pdsim.metrics.detectors import diagnose
    from pdsim.metrics.verdicts import check_text, slo_failure_lines

    items = [html.P(line) for line in slo_failure_lines(v.summary)]
    for i, vd in enumerate(diagnose(v.res)):
        colour = _SEVERITY_COLOURS.get(vd.severity, "#555")
        tries = []
        for j, s in enumerate(vd.suggestions):
            apply = [html.Button("Apply ▶", id={"type": "apply-sugg", "v": i, "s": j}, className="apply",
                                 title="run this scenario with these overrides and compare before / after")
                     ] if s.overrides and v.res.scenario is not None else []
            tries.append(html.Div([html.B("try: "), s.action, " "]
                                  + [x for o in s.overrides for x in (html.Code(f"--set {o}"), " ")]
                                  + [html.Br(), html.I(s.why)]
                                  + ([html.Br(), html.Span("checked: " + check_text(s.check))] if s.check else [])
                                  + ([html.Br(), html.Span(s.note, className="hint")] if s.note and not s.check else [])
                                  + ([html.Br()] + apply if apply else []),
                                  className="verdict-try"))
        items.append(html.Div([html.H4([html.Code(vd.kind), html.Span(f" ({vd.severity}) ", style={"color": colour}),
                                        vd.title]),
                               html.Ul([html.Li(e) for e in vd.evidence])] + tries,
                              className="verdict", style={"borderLeft": f"6px solid {colour}", "padding": "4px 12px",
                                                          "margin": "8px 0", "background": "#fafafa"}))
    return html.Div(items, id="verdicts")


def _links(v: RunView):
    if not v.res.record.disaggregated:
        return views.empty_state("No KV transfer links: this deployment is colocated (prefill and decode in one "
                                 "engine), so no KV cache crosses the network.", "links-none")
    if not has_links(v.res):
        return views.empty_state("No KV transfer was recorded on any link in this run.", "links-none")
    return html.Div([dcc.Graph(id="g-link-util", figure=link_util_figure(v.res)),
                     html.Div("The same traffic in Gbit/s, with each link's capacity dotted:", className="hint"),
                     dcc.Graph(id="g-links", figure=link_timeline_figure(v.res))])


def _instances(v: RunView):
    kv = kv_use(v.res)
    parts = [html.Div(views.instance_table(v.summary, kv), id="instances")]
    if kv:
        parts.append(dcc.Graph(id="g-kv", figure=kv_memory_figure(v.res)))
    return html.Div(parts)


BEFORE_AFTER = (("goodput_share", "requests meeting the SLO", "{:.1%}", +1),
                ("request_goodput", "goodput (req/s)", "{:,.2f}", +1),
                ("mean_ttft_ms", "mean TTFT (ms)", "{:,.1f}", -1),
                ("p90_ttft_ms", "p90 TTFT (ms)", "{:,.1f}", -1),
                ("mean_itl_ms", "mean ITL (ms)", "{:,.2f}", -1),
                ("p90_itl_ms", "p90 ITL (ms)", "{:,.2f}", -1),
                ("mean_tpot_ms", "mean TPOT (ms)", "{:,.2f}", -1),
                ("output_throughput", "output tokens/s", "{:,.0f}", +1),
                ("gpus", "GPUs", "{:,.0f}", -1))


def before_after_rows(before: dict, after: dict) -> list[tuple[str, str, str, str, str]]:
    """(metric, before, after, change, better|worse|same) for the metrics both summaries have."""
    out = []
    for key, label, fmt, sign in BEFORE_AFTER:
        b, a = before.get(key), after.get(key)
        if not isinstance(b, (int, float)) or not isinstance(a, (int, float)):
            continue
        if b == a:
            change, mark = "=", "same"
        else:
            change = (f"{(a - b) / abs(b):+.1%}" if b else f"{a - b:+.3g}")
            mark = "better" if (a - b) * sign > 0 else "worse"
        out.append((label, fmt.format(b), fmt.format(a), change, mark))
    return out


_MARK_COLOURS = {"better": "#1b7a1b", "worse": "#b00020", "same": "#555"}


def _before_after(v: RunView):
    if v.before is None:
        return None
    applied = v.applied or {}
    rows = before_after_rows(v.before.summary(), v.summary)
    head = html.Tr([html.Th("metric"), html.Th(f"before: {applied.get('base_label', 'the run')}"),
                    html.Th(f"after: {v.label}"), html.Th("change")])
    body = [html.Tr([html.Td(m), html.Td(b), html.Td(a), html.Td(c, style={"color": _MARK_COLOURS[k]})])
            for m, b, a, c, k in rows]
    sets = [x for o in applied.get("overrides") or [] for x in (html.Code(f"--set {o}"), " ")]
    return html.Div([html.Div([html.B("applied: "), str(applied.get("action") or ""), " "] + sets),
                     html.Table([html.Thead(head), html.Tbody(body)], className="table")], id="before-after")


def window_max(res: Results) -> float:
    """The end of the request-lives window slider: the last finish (or the run's end), s."""
    df = res.requests
    t = df.loc[df["finished"], "finish_s"].max() if df["finished"].any() else res.record.end_s
    return float(max(t if t == t else 0.0, 1e-3))


def _lives(v: RunView):
    end = window_max(v.res)
    return html.Div([
        dcc.Graph(id="g-gantt", figure=request_gantt_figure(v.res)),
        html.Div([html.Label("time window (s): drag the ends or type the times to zoom in; 25 requests alive in the window are shown",
                             className="hint"),
                  dcc.RangeSlider(id="gantt-window", min=0.0, max=round(end, 3), value=[0.0, round(end, 3)],
                                  allowCross=False, tooltip={"placement": "bottom", "always_visible": False},
                                  marks=None, updatemode="mouseup")],
                 className="window"),
    ])


RUN_SECTIONS: list[Section] = [
    Section("header", None, lambda v: views.run_header(v.res)),
    Section("before-after", "Suggestion applied: before / after (re-simulated, same workload and seed)",
            _before_after),
    Section("slo", None, lambda v: html.Div(views.slo_banner(v.summary), id="slo-banner")),
    Section("summary", lambda v: f"Summary of run {v.label}", _summary),
    Section("verdicts", "What limits this run", _verdicts),
    Section("instances", "Instances (KV: live KV held by running requests apart from prefix-cache residency)",
            _instances),
    Section("latency", "Latency against the SLO", lambda v: dcc.Graph(id="g-cdf", figure=latency_cdf_figure(v.res))),
    Section("ttft", "Where TTFT goes, and throughput", lambda v: html.Div(
        [dcc.Graph(id="g-breakdown", figure=ttft_breakdown_figure(v.res)),
         dcc.Graph(id="g-throughput", figure=throughput_timeline_figure(v.res))], className="two")),
    Section("timelines", "Instances over time",
            lambda v: dcc.Graph(id="g-instances", figure=instance_timeline_figure(v.res))),
    Section("links", "KV transfer links", _links),
    Section("events", "Failures and scaling",
            lambda v: dcc.Graph(id="g-events", figure=events_figure(v.res)) if has_events(v.res) else None),
    Section("lives", "Request lives", _lives),
]


def results_panel(res: Results, label: str, sections: list[Section] | None = None, before: Results | None = None,
                  applied: dict | None = None) -> list:
    """The sections of one run, in order; ``before`` (the run a suggestion was applied to, with
    ``applied`` saying what) adds the before / after section."""
    view = RunView(res, res.summary(), label, before, applied)
    out = []
    for sec in sections or RUN_SECTIONS:
        body = sec.build(view)
        if body is None:
            continue
        title = sec.title(view) if callable(sec.title) else sec.title
        head = [html.Div(title, className="section-title")] if title else []
        out.append(html.Section(head + [body], id=f"res-{sec.key}"))
    return out
