"""Dash callbacks. The Build tab's logic is the pure function ``build_sync`` (tested without a
browser); the others are thin glue between stores, the job manager and the shared figure
builders of pdsim.report."""
from __future__ import annotations

import re
import time

import dash
import plotly.graph_objects as go
from dash import ALL, Input, Output, State, html, no_update

import pdsim
from pdsim.report.figures import (instance_timeline_figure, latency_cdf_figure, link_timeline_figure,
                                  request_gantt_figure, throughput_timeline_figure, ttft_breakdown_figure)

from . import forms, uploads, views
from .forms import FIELDS, FORM_IDS, ROLES, SECTIONS
from .sweeps import config_text, open_sweep

HIDDEN = {"display": "none"}


def _placeholder(text: str) -> go.Figure:
    fig = go.Figure()
    fig.add_annotation(text=text, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper",
                       font=dict(size=14, color="#888"))
    fig.update_layout(height=220, xaxis_visible=False, yaxis_visible=False, margin=dict(t=20, b=20, l=20, r=20),
                      plot_bgcolor="white")
    return fig


def _err(text: str) -> html.Span:
    return html.Span(text, className="msg-err")


def _ok(text: str) -> html.Span:
    return html.Span(text, className="msg-ok")


def ok_message(resolved) -> str:
    gpn = resolved.hardware.gpus_per_node
    gpus = sum(g.count * g.gpus_per_instance(gpn) for _r, _i, g in resolved.scenario.cluster.groups())
    return (f"OK: {resolved.name}: {views.layout_text(resolved)}; {gpus} GPUs ({gpus / gpn:g} nodes) of "
            f"{resolved.hardware.name}, {resolved.model.name}")


def _run_options(runs: list | None) -> list[dict]:
    return [{"label": r["label"], "value": r["jid"]} for r in reversed(runs or [])]


def build_sync(trigger: str | None, text: str | None, values: dict, example: str | None = None,
               upload: tuple | None = None, load: dict | None = None) -> dict:
    """What the Build tab shows after ``trigger`` (None = page load, "example", "upload",
    "load-request", "yaml"/"validate", or form control ids joined by ','). Returns the new YAML
    text, the form values to show (None = keep), per-control and per-section errors, the
    message line, which groups are visible and their notes."""
    note, text_out, fail = None, text or "", None
    changed = [t for t in (trigger or "").split(",") if t in FIELDS]
    try:
        if trigger in (None, "", "example"):
            text_out = forms.example_yaml(example or "llama8b-a800-colocated")
        elif trigger == "upload":
            kind, payload, n = uploads.save_upload(*(upload or (None, None)))
            name = (upload or (None, "upload"))[1]
            if kind == "scenario":
                text_out, note = payload, f"loaded {name}"
            else:
                text_out = forms.dump_yaml(uploads.use_trace(forms.parse_yaml(text_out), payload))
                note = f"uploaded trace {name}: {n:,} requests"
        elif trigger == "load-request" and load:
            text_out, note = load.get("text", text_out), load.get("msg")
        elif changed:
            data = forms.apply_changes(forms.parse_yaml(text_out), {c: values.get(c) for c in changed})
            text_out = forms.dump_yaml(data)
    except pdsim.SpecError as err:
        fail = err
    data = None
    try:
        data = forms.parse_yaml(text_out)
    except pdsim.SpecError as err:
        fail = fail or err
    resolved, err = forms.validate(text_out) if fail is None else (None, fail)
    errors = {c: "" for c in FORM_IDS}
    sections = {s: "" for s in SECTIONS}
    if err is not None:
        cid, sec = forms.route_error(err.field)
        if getattr(err, "control", None) in FIELDS:  # e.g. a bad trace file: its own source, shown at its control
            cid, sec = err.control, FIELDS[err.control].section
        if trigger == "upload" and fail is not None:
            sections["workload"] = str(err)
        elif cid is not None and fail is None:
            errors[cid] = str(err)
        else:
            sections[sec] = str(err)
    shown = forms.form_values(data) if data is not None else {}
    layout = forms.layout_of(data) if data is not None else "disaggregated"
    visible = {"p": layout == "disaggregated", "d": layout == "disaggregated", "c": layout == "colocated"}
    if err is not None:
        msg = _err(str(err))
    else:
        msg = _ok(ok_message(resolved) + (f"  ({note})" if note else ""))
    return {"text": text_out, "values": {c: (None if c in changed else shown.get(c)) for c in FORM_IDS},
            "keep": set(changed) if data is not None else set(FORM_IDS), "errors": errors, "sections": sections,
            "message": msg, "visible": visible, "notes": forms.group_notes(data) if data is not None else {},
            "ok": err is None}


def register(app: dash.Dash, jobs) -> None:
    letters = list(ROLES)

    @app.callback(
        Output("yaml", "value"), [Output(c, "value") for c in FORM_IDS],
        Output("f-workload-trace-path", "options"),
        [Output(f"{c}-err", "children") for c in FORM_IDS], [Output(f"sec-{s}-err", "children") for s in SECTIONS],
        Output("build-msg", "children"), [Output(f"box-{x}", "style") for x in letters],
        [Output(f"note-{x}", "children") for x in letters], Output("upload", "contents"),
        Input("example", "value"), Input("yaml", "n_blur"), Input("validate", "n_clicks"),
        Input("upload", "contents"), Input("load-request", "data"), [Input(c, "value") for c in FORM_IDS],
        State("upload", "filename"), State("yaml", "value"))
    def sync(example, _blur, _check, contents, load, *rest):
        values = dict(zip(FORM_IDS, rest[:len(FORM_IDS)]))
        filename, text = rest[len(FORM_IDS):]
        ids = [k.rsplit(".", 1)[0] for k in dash.ctx.triggered_prop_ids] if dash.ctx.triggered_id else []
        if "example" in ids:
            trigger = "example"
        elif "upload" in ids:
            trigger = "upload" if contents else "yaml"
        elif "load-request" in ids:
            trigger = "load-request"
        elif ids and all(i in FIELDS for i in ids):
            trigger = ",".join(ids)
        else:
            trigger = "yaml" if ids else None
        st = build_sync(trigger, text, values, example, (contents, filename), load)
        form = [no_update if c in st["keep"] else st["values"][c] for c in FORM_IDS]
        trace = forms.TRACE_CONTROL
        trace_opts = uploads.trace_options(st["values"].get(trace) or values.get(trace))
        return (st["text"] if st["text"] != text else no_update, *form, trace_opts,
                *[st["errors"][c] for c in FORM_IDS], *[st["sections"][s] for s in SECTIONS], st["message"],
                *[None if st["visible"][x] else HIDDEN for x in letters], *[st["notes"].get(x, "") for x in letters],
                None if contents else no_update)

    @app.callback(Output("download", "data"), Input("download-btn", "n_clicks"), State("yaml", "value"),
                  prevent_initial_call=True)
    def download(_n, text):
        try:
            name = str(forms.parse_yaml(text or "").get("name") or "scenario")
        except pdsim.SpecError:
            name = "scenario"
        return dict(content=text or "", filename=re.sub(r"[^A-Za-z0-9._-]+", "_", name)[:80] + ".yaml")

    # ---- run ----------------------------------------------------------------------------
    @app.callback(Output("active-job", "data"), Output("poll", "disabled"), Output("progress", "children"),
                  Output("tabs", "value", allow_duplicate=True), Output("build-msg", "children", allow_duplicate=True),
                  Input("run", "n_clicks"), Input("build-run", "n_clicks"), State("yaml", "value"),
                  State("active-job", "data"), State("runs", "data"), prevent_initial_call=True)
    def start_run(_a, _b, text, active, runs):
        from_build = dash.ctx.triggered_id == "build-run"
        job = jobs.get(active)
        if job is not None and job.active:
            return no_update, False, "a run is in progress: wait or cancel it", "run", no_update
        resolved, err = forms.validate(text or "")
        if err is not None:
            msg = _err(str(err))
            return no_update, True, msg, no_update, msg if from_build else no_update
        jid = jobs.start(resolved, f"#{len(runs or []) + 1} {resolved.name} [{views.layout_code(resolved)}]")
        return jid, False, "starting...", "run", no_update

    @app.callback(Output("progress", "children", allow_duplicate=True), Input("cancel", "n_clicks"),
                  State("active-job", "data"), prevent_initial_call=True)
    def cancel(_n, jid):
        return "cancelled" if jobs.cancel(jid) else "no run in progress"

    @app.callback(Output("progress", "children", allow_duplicate=True),
                  Output("poll", "disabled", allow_duplicate=True),
                  Output("runs", "data"), Output("run-select", "options"), Output("run-select", "value"),
                  Input("poll", "n_intervals"), State("active-job", "data"), State("runs", "data"),
                  prevent_initial_call=True)
    def poll(_n, jid, runs):
        job = jobs.get(jid)
        if job is None:
            return no_update, True, no_update, no_update, no_update
        if job.active:
            pct = 100.0 * job.done / job.total if job.total else 0.0
            bar = html.Span([html.Progress(value=f"{pct:.0f}", max="100"),
                             f" {job.done:,}/{job.total:,} requests, simulated {job.sim_s:,.1f} s "
                             f"in {time.perf_counter() - job.started:.1f} s"])
            return bar, False, no_update, no_update, no_update
        if job.status == "done":
            runs = [r for r in (runs or []) if r["jid"] != jid] + [{"jid": jid, "label": job.label}]
            return _ok(f"done: {job.label} in {job.wall_s:.1f} s"), True, runs, _run_options(runs), jid
        return _err(f"{job.status}: {job.error or ''}".strip(": ")), True, no_update, no_update, no_update

    @app.callback(Output("compare-select", "options"), Input("runs", "data"))
    def compare_options(runs):
        return _run_options(runs)

    @app.callback(Output("run-header", "children"), Output("slo-banner", "children"), Output("cards", "children"),
                  Output("instances", "children"), Output("g-cdf", "figure"), Output("g-breakdown", "figure"),
                  Output("g-throughput", "figure"), Output("g-instances", "figure"), Output("g-links", "figure"),
                  Output("g-gantt", "figure"), Output("run-body", "style"), Input("run-select", "value"))
    def show(jid):
        job = jobs.get(jid)
        if job is None or job.result is None:
            text = "Run a scenario (Run ▶) to see its results." if not jid else "This run is no longer in memory."
            return (html.Div(text, className="hint"), None, None, None, *[no_update] * 6, HIDDEN)
        res = job.result
        s = res.summary()
        links = (link_timeline_figure(res) if res.record.disaggregated
                 else _placeholder("no KV transfer links in a colocated deployment"))
        return (views.run_header(res), views.slo_banner(s), views.summary_cards(s), views.instance_table(s),
                latency_cdf_figure(res), ttft_breakdown_figure(res), throughput_timeline_figure(res),
                instance_timeline_figure(res), links, request_gantt_figure(res), None)

    # ---- compare ------------------------------------------------------------------------
    @app.callback(Output("compare-select", "value"), Input("pin", "n_clicks"), Input("clear-pins", "n_clicks"),
                  State("run-select", "value"), State("compare-select", "value"), prevent_initial_call=True)
    def pin(_p, _c, jid, selected):
        if dash.ctx.triggered_id == "clear-pins":
            return []
        selected = list(selected or [])
        if jid and jid not in selected:
            selected.append(jid)
        return selected

    @app.callback(Output("compare-table", "children"), Output("c-cdf", "figure"), Output("c-breakdown", "figure"),
                  Output("c-throughput", "figure"), Output("compare-body", "style"), Input("compare-select", "value"),
                  State("runs", "data"))
    def compare(selected, runs):
        labels = {r["jid"]: r["label"] for r in runs or []}
        pinned = {}
        for jid in selected or []:
            job = jobs.get(jid)
            if job is not None and job.result is not None:
                pinned[labels.get(jid, job.label)] = job.result
        if not pinned:
            text = "Pin runs (Run & see → Pin to Compare) or pick them above to overlay them here."
            return html.Div(text, className="hint"), no_update, no_update, no_update, HIDDEN
        return (views.compare_table(pinned), latency_cdf_figure(pinned), ttft_breakdown_figure(pinned),
                throughput_timeline_figure(pinned), None)

    # ---- explore ------------------------------------------------------------------------
    @app.callback(Output("sweep-msg", "children"), Output("sweep-folder", "data"),
                  Output("heat-x", "options"), Output("heat-x", "value"), Output("heat-y", "options"),
                  Output("heat-y", "value"), Output("heat-metric", "options"), Output("heat-metric", "value"),
                  Input("open-sweep", "n_clicks"), Input("sweep-dir", "value"), prevent_initial_call=True)
    def open_folder(_n, folder):
        try:
            sw = open_sweep(folder)
        except pdsim.SpecError as err:
            return (_err(str(err)), None) + (no_update,) * 6
        x, y = sw.default_axes()
        axis_opts = [{"label": views.short_name(k), "value": k} for k in sw.axes]
        msg = _ok(f"{sw.path}: {len(sw.df)} configurations ({len(sw.ok)} feasible)")
        return msg, str(sw.path), axis_opts, x, axis_opts, y, sw.metrics, sw.default_metric()

    @app.callback(Output("x-pareto", "figure"), Output("x-heatmap", "figure"), Output("x-table", "children"),
                  Input("sweep-folder", "data"), Input("pareto-view", "value"), Input("heat-x", "value"),
                  Input("heat-y", "value"), Input("heat-metric", "value"))
    def explore_figures(folder, view, x, y, metric):
        from pdsim.report.sweep_figures import goodput_ttft_figure, heatmap_figure, pareto_figure

        if not folder:
            return _placeholder("open a sweep result folder"), _placeholder(""), None
        try:
            sw = open_sweep(folder)
            table = views.sweep_table(sw, metric)
            if not len(sw.ok):
                return _placeholder("no feasible configuration in this sweep"), _placeholder(""), table
            par = (goodput_ttft_figure(sw.df, sw.knobs) if view == "goodput_ttft"
                   else pareto_figure(sw.df, sw.frontier(view), sw.knobs))
            if x and y and metric and x != y:
                heat = heatmap_figure(sw.df, x, y, metric)
            else:
                heat = _placeholder("pick two different knobs and a metric")
            return par, heat, table
        except Exception as err:  # noqa: BLE001 - an odd results.csv shows a message, not a dead page
            return _placeholder(f"cannot draw this sweep: {err}"), _placeholder(""), None

    @app.callback(Output("load-request", "data"), Output("tabs", "value", allow_duplicate=True),
                  Output("sweep-msg", "children", allow_duplicate=True),
                  Input("x-pareto", "clickData"), Input({"type": "load-cfg", "id": ALL}, "n_clicks"),
                  State("sweep-folder", "data"), prevent_initial_call=True)
    def load_config(click, _clicks, folder):
        trig = dash.ctx.triggered_id
        if isinstance(trig, dict):
            if not (dash.ctx.triggered and dash.ctx.triggered[0].get("value")):
                return no_update, no_update, no_update  # a row appeared, nobody clicked
            cid = trig.get("id")
        else:
            try:
                cid = click["points"][0]["customdata"]
            except (TypeError, KeyError, IndexError):
                cid = None
        if not cid or not folder:
            return no_update, no_update, no_update
        try:
            text = config_text(folder, str(cid))
        except pdsim.SpecError as err:
            return no_update, no_update, _err(str(err))
        return {"text": text, "msg": f"sweep configuration {cid}", "nonce": time.time()}, "build", no_update
