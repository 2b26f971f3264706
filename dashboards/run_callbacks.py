"""Run & see and Compare callbacks: start, poll and cancel a session's background run, show
its results panel (panels.py), zoom its request lives, pin runs and overlay them. Every job is
looked up with the page's session id, so a page sees only its own runs."""
from __future__ import annotations

import time

import dash
from dash import Input, Output, State, html, no_update

import pdsim
from pdsim.report.figures import latency_cdf_figure, request_gantt_figure, throughput_timeline_figure, \
    ttft_breakdown_figure

from . import panels, views
from .build_callbacks import err_span, ok_span
from .validation import validate

HIDDEN = {"display": "none"}


def run_options(services, sid) -> list[dict]:
    """The session's finished runs, newest first."""
    return [{"label": j.label, "value": j.jid} for j in reversed(services.jobs.runs(sid))]


def _latest(services, sid) -> str | None:
    runs = services.jobs.runs(sid)
    return runs[-1].jid if runs else None


def _session(services, sid) -> str | None:
    try:
        return services.session(sid)
    except pdsim.SpecError:
        return None


def start_run(services, sid, text) -> tuple[str | None, str | html.Span]:
    """(job id or None, progress message) after Run ▶ with the editor's ``text``."""
    sid = _session(services, sid)
    if sid is None:
        return None, err_span("this page has no valid session; reload the page")
    resolved, err = validate(text, services.sandbox)
    if err is not None:
        return None, err_span(str(err))
    try:
        job = services.jobs.start(sid, resolved, "#{n} " + f"{resolved.name} [{views.layout_code(resolved)}]")
    except pdsim.SpecError as refused:
        return None, err_span(str(refused))
    return job.jid, f"starting {job.label}..."


def pin_runs(selected, jid, max_pins: int) -> tuple[list, str]:
    """The pinned runs after pinning ``jid``: at most ``max_pins``, the oldest pin dropped."""
    pins = [j for j in (selected if isinstance(selected, list) else []) if isinstance(j, str)]
    if isinstance(jid, str) and jid and jid not in pins:
        pins.append(jid)
    if len(pins) > max_pins:
        return pins[-max_pins:], f"at most {max_pins} runs are overlaid: the oldest pin was dropped"
    return pins, ""


def register_run(app: dash.Dash, services) -> None:
    jobs = services.jobs
    limits = services.config.limits

    @app.callback(Output("run-select", "options"), Output("compare-select", "options"),
                  Input("session", "data"))
    def session_runs(sid):  # page load (or reload in the same tab): the session's runs
        sid = _session(services, sid)
        opts = run_options(services, sid)
        return opts, opts

    @app.callback(Output("active-job", "data"), Output("poll", "disabled"), Output("progress", "children"),
                  Output("tabs", "value", allow_duplicate=True), Output("build-msg", "children", allow_duplicate=True),
                  Output("run-select", "value", allow_duplicate=True),
                  Input("run", "n_clicks"), Input("build-run", "n_clicks"), State("yaml", "value"),
                  State("session", "data"), prevent_initial_call=True)
    def on_run(_a, _b, text, sid):
        from_build = dash.ctx.triggered_id == "build-run"
        jid, msg = start_run(services, sid, text)
        if jid is None:
            return no_update, True, msg, no_update, msg if from_build else no_update, no_update
        return jid, False, msg, "run", no_update, None  # clear the shown run: its cards are not this run's

    @app.callback(Output("progress", "children", allow_duplicate=True), Input("cancel", "n_clicks"),
                  State("active-job", "data"), State("session", "data"), prevent_initial_call=True)
    def cancel(_n, jid, sid):
        return "cancelled" if jobs.cancel(_session(services, sid), jid) else "no run in progress"

    @app.callback(Output("progress", "children", allow_duplicate=True),
                  Output("poll", "disabled", allow_duplicate=True),
                  Output("run-select", "options", allow_duplicate=True),
                  Output("compare-select", "options", allow_duplicate=True),
                  Output("run-select", "value", allow_duplicate=True),
                  Input("poll", "n_intervals"), State("active-job", "data"), State("session", "data"),
                  prevent_initial_call=True)
    def poll(_n, jid, sid):
        sid = _session(services, sid)
        job = jobs.get(sid, jid)
        if job is None:
            return no_update, True, no_update, no_update, no_update
        if job.active:
            pct = 100.0 * job.done / job.total if job.total else 0.0
            bar = html.Span([html.Progress(value=f"{pct:.0f}", max="100"),
                             f" {job.label}: {job.done:,}/{job.total:,} requests, simulated {job.sim_s:,.1f} s "
                             f"in {time.perf_counter() - job.started:.1f} s"])
            return bar, False, no_update, no_update, no_update
        opts = run_options(services, sid)
        if job.status == "done":
            return ok_span(f"done: {job.label} in {job.wall_s:.1f} s"), True, opts, opts, jid
        msg = job.status + (f": {job.error}" if job.error else "")
        return err_span(msg), True, opts, opts, _latest(services, sid)

    @app.callback(Output("results", "children"), Input("run-select", "value"), State("session", "data"),
                  State("applied", "data"))
    def show(jid, sid, applied):
        sid = _session(services, sid)
        job = jobs.get(sid, jid)
        if job is None or job.result is None:
            pending = jobs.active(sid)
            if pending is not None:
                return views.running_state(pending.label)
            if jid:
                return views.empty_state(f"This run is no longer kept (the server keeps {limits.runs_per_session} "
                                         "finished runs per page).", "run-gone")
            return views.empty_state(views.NO_RUN, "run-empty")
        how = applied.get(jid) if isinstance(applied, dict) and isinstance(jid, str) else None
        base = jobs.get(sid, how.get("base")) if isinstance(how, dict) else None
        if base is None or base.result is None:
            return panels.results_panel(job.result, job.label)
        return panels.results_panel(job.result, job.label, before=base.result, applied=how)

    @app.callback(Output("g-gantt", "figure"), Input("gantt-window", "value"), State("run-select", "value"),
                  State("session", "data"), prevent_initial_call=True)
    def zoom_lives(window, jid, sid):
        job = jobs.get(_session(services, sid), jid)
        if job is None or job.result is None:
            return no_update
        if not (isinstance(window, list) and len(window) == 2 and all(isinstance(x, (int, float)) for x in window)):
            return no_update
        return request_gantt_figure(job.result, window=(float(window[0]), float(window[1])))

    # ---- compare ------------------------------------------------------------------------
    @app.callback(Output("compare-select", "value"), Output("pin-msg", "children"),
                  Input("pin", "n_clicks"), Input("clear-pins", "n_clicks"),
                  State("run-select", "value"), State("compare-select", "value"), prevent_initial_call=True)
    def pin(_p, _c, jid, selected):
        if dash.ctx.triggered_id == "clear-pins":
            return [], ""
        return pin_runs(selected, jid, limits.max_pins)

    @app.callback(Output("compare-empty", "children"), Output("compare-empty", "style"),
                  Output("compare-table", "children"), Output("c-cdf", "figure"), Output("c-breakdown", "figure"),
                  Output("c-throughput", "figure"), Output("compare-body", "style"), Input("compare-select", "value"),
                  State("session", "data"))
    def compare(selected, sid):
        sid = _session(services, sid)
        pinned = {}
        for jid in (selected if isinstance(selected, list) else [])[-limits.max_pins:]:
            job = jobs.get(sid, jid)
            if job is not None and job.result is not None:
                pinned[job.label] = job.result
        if not pinned:
            note = views.NO_PINS if not selected else (
                f"The pinned runs are no longer kept (the server keeps {limits.runs_per_session} finished runs per "
                "page): run them again and pin them.")
            return note, None, None, no_update, no_update, no_update, HIDDEN
        return (None, HIDDEN, views.compare_table(pinned), latency_cdf_figure(pinned), ttft_breakdown_figure(pinned),
                throughput_timeline_figure(pinned), None)
