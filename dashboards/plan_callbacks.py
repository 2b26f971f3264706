"""Planning callbacks: launch commands of the scenario in the editor (text + download), a
finished run's downloads (requests as Parquet / CSV, the HTML report), applying a verdict's
suggestion (a background run of the same scenario with its overrides, shown before / after),
and sweeps started from the Explore tab (sweep_jobs.py) with their progress.

Every run and sweep is looked up with the page's session id (``services.session``), as the
other callbacks do; what a client sends is only ever an index or an id looked up there."""
from __future__ import annotations

import atexit
import time

import dash
from dash import ALL, Input, Output, State, html, no_update

import pdsim

from . import downloads, views
from .build_callbacks import err_span, ok_span
from .sweep_jobs import SweepRunner, parse_values
from .validation import validate

HIDDEN = {"display": "none"}
SHOWN = {"display": "block"}


def _session(services, sid) -> str | None:
    try:
        return services.session(sid)
    except pdsim.SpecError:
        return None


def launch_view(services, text, engine) -> tuple[str, object]:
    """(script text or "", message) for the editor's ``text``."""
    resolved, err = validate(text, services.sandbox)
    if err is not None:
        return "", err_span(f"cannot write launch commands: {err}")
    try:
        script = downloads.launch_text(resolved, engine if engine in downloads.ENGINES else "sglang")
    except pdsim.SpecError as err:
        return "", err_span(f"cannot write launch commands: {err}")
    lines = script.count("\n")
    return script, ok_span(f"{resolved.name}: {lines} lines for {engine}; run it as launch.sh <node index> on each "
                           "node and launch.sh router on the router host")


def suggestion_of(res, vi: object, si: object):
    """The ``si``-th suggestion of the ``vi``-th verdict of ``res`` (as the panel listed them),
    with its verdict; None when the indexes do not name one."""
    from pdsim.metrics.detectors import diagnose

    if not (isinstance(vi, int) and isinstance(si, int)) or vi < 0 or si < 0:
        return None
    found = diagnose(res)
    if vi >= len(found) or si >= len(found[vi].suggestions):
        return None
    return found[vi], found[vi].suggestions[si]


def applied_text(res, overrides) -> str:
    """The scenario YAML of run ``res`` (its ResolvedScenario's scenario) with ``overrides``
    (``field=value``) applied."""
    from pdsim.explore.what_if import plain
    from pdsim.specs.scenario import apply_overrides

    from . import forms

    return forms.dump_yaml(apply_overrides(plain(res.scenario.scenario), list(overrides)))


def apply_suggestion(services, sid, base_jid, vi, si) -> dict:
    """Start the run of a suggestion applied to session ``sid``'s run ``base_jid``. Returns
    {"jid", "text", "applied"} or {"error"}."""
    job = services.jobs.get(sid, base_jid)
    if job is None or job.result is None or job.result.scenario is None:
        return {"error": "the run this suggestion belongs to is no longer kept; run it again"}
    found = suggestion_of(job.result, vi, si)
    if found is None:
        return {"error": "that suggestion is no longer listed for this run"}
    verdict, sug = found
    try:
        text = applied_text(job.result, sug.overrides)
    except pdsim.SpecError as err:
        return {"error": f"not applicable: {err}"}
    resolved, err = validate(text, services.sandbox)
    if err is not None:
        return {"error": f"not applicable: {err}"}
    try:
        new = services.jobs.start(sid, resolved, "#{n} " + f"{resolved.name} [{views.layout_code(resolved)}] "
                                  f"after {' '.join(sug.overrides)}")
    except pdsim.SpecError as refused:
        return {"error": str(refused)}
    return {"jid": new.jid, "text": text, "applied": {"base": job.jid, "base_label": job.label,
                                                      "action": sug.action, "verdict": verdict.kind,
                                                      "overrides": list(sug.overrides)}}


def sweep_axes(f1, v1, f2, v2) -> list[tuple[str, list]]:
    """The axes picked on the page; SpecError naming the box that is wrong."""
    axes = []
    for n, (f, v) in enumerate(((f1, v1), (f2, v2)), start=1):
        if not f and not (isinstance(v, str) and v.strip()):
            continue
        if not isinstance(f, str) or not f:
            raise pdsim.SpecError("pick the knob these values are for", field=f"sweep axis {n}")
        axes.append((f, parse_values(v, f"sweep axis {n} values")))
    if not axes:
        raise pdsim.SpecError("pick a knob and its values", field="sweep axis 1")
    return axes


def register_plan(app: dash.Dash, services) -> SweepRunner:
    jobs = services.jobs
    sweeps = SweepRunner(services.config.data_dir)
    atexit.register(sweeps.shutdown)
    app.pdsim_sweeps = sweeps

    # ---- launch commands -------------------------------------------------------------------
    @app.callback(Output("launch-panel", "style"), Output("launch-text", "children"),
                  Output("launch-msg", "children"),
                  Input("launch-btn", "n_clicks"), Input("launch-engine", "value"), Input("launch-close", "n_clicks"),
                  State("yaml", "value"), State("launch-panel", "style"), prevent_initial_call=True)
    def show_launch(_n, engine, _close, text, style):
        if dash.ctx.triggered_id == "launch-close":
            return HIDDEN, "", None
        if dash.ctx.triggered_id == "launch-engine" and (style or {}).get("display") == "none":
            return no_update, no_update, no_update
        script, msg = launch_view(services, text, engine)
        return SHOWN, script, msg

    @app.callback(Output("launch-download", "data"), Output("launch-msg", "children", allow_duplicate=True),
                  Input("launch-download-btn", "n_clicks"), State("yaml", "value"), State("launch-engine", "value"),
                  prevent_initial_call=True)
    def download_launch(_n, text, engine):
        engine = engine if engine in downloads.ENGINES else "sglang"
        script, msg = launch_view(services, text, engine)
        if not script:
            return no_update, msg
        resolved, _err = validate(text, services.sandbox)
        return downloads.launch_download(script, resolved.name, engine), msg

    # ---- downloads of the run shown ------------------------------------------------------------
    @app.callback(Output("run-download", "data"), Output("dl-msg", "children"),
                  Input("dl-parquet", "n_clicks"), Input("dl-csv", "n_clicks"), Input("dl-html", "n_clicks"),
                  State("run-select", "value"), State("session", "data"), prevent_initial_call=True)
    def download_run(_p, _c, _h, jid, sid):
        job = jobs.get(_session(services, sid), jid)
        if job is None or job.result is None:
            return no_update, err_span("no finished run is shown: run one, or pick one above")
        fmt = {"dl-parquet": "parquet", "dl-csv": "csv", "dl-html": "html"}[dash.ctx.triggered_id]
        return downloads.run_download(job.result, fmt), f"{job.label}: {fmt} sent"

    # ---- apply a suggestion --------------------------------------------------------------------
    @app.callback(Output("active-job", "data", allow_duplicate=True), Output("poll", "disabled", allow_duplicate=True),
                  Output("progress", "children", allow_duplicate=True),
                  Output("run-select", "value", allow_duplicate=True), Output("applied", "data"),
                  Output("load-request", "data", allow_duplicate=True),
                  Input({"type": "apply-sugg", "v": ALL, "s": ALL}, "n_clicks"),
                  State("run-select", "value"), State("session", "data"), State("applied", "data"),
                  prevent_initial_call=True)
    def apply(_clicks, base_jid, sid, applied):
        trig = dash.ctx.triggered_id
        if not isinstance(trig, dict) or not (dash.ctx.triggered and dash.ctx.triggered[0].get("value")):
            return (no_update,) * 6  # the buttons appeared; nobody clicked
        sid = _session(services, sid)
        if sid is None:
            return no_update, True, err_span("this page has no valid session; reload the page"), *(no_update,) * 3
        out = apply_suggestion(services, sid, base_jid, trig.get("v"), trig.get("s"))
        if "error" in out:
            return no_update, True, err_span(out["error"]), no_update, no_update, no_update
        applied = {k: v for k, v in (applied if isinstance(applied, dict) else {}).items()
                   if jobs.get(sid, k) is not None}  # only runs still kept
        applied[out["jid"]] = out["applied"]
        load = {"text": out["text"], "msg": f"applied {' '.join(out['applied']['overrides'])} to "
                f"{out['applied']['base_label']}", "nonce": time.time()}
        return out["jid"], False, f"starting the run with {' '.join(out['applied']['overrides'])}...", None, \
            applied, load

    # ---- sweeps from the page ------------------------------------------------------------------
    @app.callback(Output("sweep-job", "data"), Output("sweep-poll", "disabled"), Output("sweep-progress", "children"),
                  Input("sweep-start", "n_clicks"), State("yaml", "value"), State("sw-field-1", "value"),
                  State("sw-values-1", "value"), State("sw-field-2", "value"), State("sw-values-2", "value"),
                  State("session", "data"), prevent_initial_call=True)
    def start_sweep(_n, text, f1, v1, f2, v2, sid):
        sid = _session(services, sid)
        if sid is None:
            return no_update, True, err_span("this page has no valid session; reload the page")
        try:
            axes = sweep_axes(f1, v1, f2, v2)
        except pdsim.SpecError as err:
            return no_update, True, err_span(str(err))
        resolved, err = validate(text, services.sandbox)
        if err is not None:
            return no_update, True, err_span(f"the scenario in Build: {err}")
        try:
            job = sweeps.start(sid, resolved, axes, services.sandbox.trust)
        except pdsim.SpecError as refused:
            return no_update, True, err_span(str(refused))
        return job.jid, False, f"starting sweep {job.name}: {job.total} configurations..."

    @app.callback(Output("sweep-progress", "children", allow_duplicate=True),
                  Output("sweep-poll", "disabled", allow_duplicate=True),
                  Output("sweep-list", "options", allow_duplicate=True), Output("sweep-list", "value"),
                  Input("sweep-poll", "n_intervals"), State("sweep-job", "data"), State("session", "data"),
                  prevent_initial_call=True)
    def poll_sweep(_n, jid, sid):
        job = sweeps.get(_session(services, sid), jid)
        if job is None:
            return no_update, True, no_update, no_update
        if job.active:
            pct = 100.0 * job.done / job.total if job.total else 0.0
            return html.Span([html.Progress(value=f"{pct:.0f}", max="100"),
                              f" sweep {job.name}: {job.done}/{job.total} configurations in "
                              f"{time.monotonic() - job.started:.1f} s"]), False, no_update, no_update
        if job.status != "done":
            return err_span(f"sweep {job.name} {job.status}" + (f": {job.error}" if job.error else "")), True, \
                no_update, no_update
        services.sweeps.refresh()
        key = next((k for k, _label, p in services.sweeps.folders() if p.resolve() == job.folder.resolve()), None)
        msg = ok_span(f"sweep {job.name} done: {job.total} configurations ({job.ok} simulated) in "
                      f"{time.monotonic() - job.started:.1f} s; opened below")
        return msg, True, services.sweeps.options(), key

    @app.callback(Output("sweep-progress", "children", allow_duplicate=True), Input("sweep-cancel", "n_clicks"),
                  State("sweep-job", "data"), State("session", "data"), prevent_initial_call=True)
    def cancel_sweep(_n, jid, sid):
        return "sweep cancelled" if sweeps.cancel(_session(services, sid), jid) else "no sweep in progress"

    return sweeps
