"""Build tab callbacks. Its logic is the pure function ``build_sync`` (tested without a
browser); ``register_build`` wires it and Download to the page."""
from __future__ import annotations

import re

import dash
from dash import Input, Output, State, html, no_update

import pdsim

from . import forms, uploads, views
from .forms import FIELDS, FORM_IDS, ROLES, SECTIONS
from .validation import TRACE_CONTROL, route_error, validate

HIDDEN = {"display": "none"}


def err_span(text: str) -> html.Span:
    return html.Span(text, className="msg-err")


def ok_span(text: str) -> html.Span:
    return html.Span(text, className="msg-ok")


def ok_message(resolved) -> str:
    gpn = resolved.hardware.gpus_per_node
    gpus = sum(g.count * g.gpus_per_instance(gpn) for _r, _i, g in resolved.scenario.cluster.groups())
    return (f"OK: {resolved.name}: {views.layout_text(resolved)}; {gpus} GPUs ({gpus / gpn:g} nodes) of "
            f"{resolved.hardware.name}, {resolved.model.name}")


def build_sync(trigger: str | None, text, values: dict, example=None, upload: tuple | None = None,
               load: dict | None = None, services=None, sid: str | None = None) -> dict:
    """What the Build tab shows after ``trigger`` (None = page load, "example", "upload",
    "load-request", "yaml"/"validate", or form control ids joined by ','). ``services`` (the
    app's sandbox and upload store) and ``sid`` (the browser session) are needed for uploads
    and validation. Returns the new YAML text, the form values to show (None = keep), per-control
    and per-section errors, the message line, which groups are visible and their notes, and
    whether the example picker should be cleared (the text is no longer that example)."""
    note, text_out, fail = None, text if isinstance(text, str) else "", None
    if text is not None and not isinstance(text, str):
        fail = pdsim.SpecError(f"expected YAML text, got {type(text).__name__}", source="scenario YAML")
    changed = [t for t in (trigger or "").split(",") if t in FIELDS]
    clear_example = False
    try:
        if fail is not None:
            pass
        elif trigger in (None, "", "example"):
            if example is not None or trigger in (None, ""):
                text_out = forms.example_yaml(example or "llama8b-a800-colocated")
        elif trigger == "upload":
            contents, name = upload or (None, None)
            if sid is None:
                raise pdsim.SpecError("this page has no valid session; reload the page", source="upload")
            kind, payload, n = services.uploads.save(sid, contents, name)
            shown = uploads._display_name(name)
            if kind == "scenario":
                text_out, note, clear_example = payload, f"loaded {shown}", True
            else:
                text_out = forms.dump_yaml(uploads.use_trace(forms.parse_yaml(text_out), payload))
                note = f"uploaded trace {shown}: {n:,} requests"
        elif trigger == "load-request" and isinstance(load, dict) and isinstance(load.get("text"), str):
            text_out, note, clear_example = load["text"], str(load.get("msg") or ""), True
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
    resolved, err = validate(text_out, services.sandbox) if fail is None else (None, fail)
    errors = {c: "" for c in FORM_IDS}
    sections = {s: "" for s in SECTIONS}
    if err is not None:
        cid, sec = route_error(err.field)
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
        msg = err_span(str(err))
    else:
        msg = ok_span(ok_message(resolved) + (f"  ({note})" if note else ""))
    return {"text": text_out, "values": {c: (None if c in changed else shown.get(c)) for c in FORM_IDS},
            "keep": set(changed) if data is not None else set(FORM_IDS), "errors": errors, "sections": sections,
            "message": msg, "visible": visible, "notes": forms.group_notes(data) if data is not None else {},
            "ok": err is None, "clear_example": clear_example}


def download_file(text) -> dict:
    """What Download sends: the editor's text as is, named after the scenario when it parses."""
    text = text if isinstance(text, str) else ""
    try:
        name = forms.parse_yaml(text).get("name")
    except pdsim.SpecError:
        name = None
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._-")[:80] if isinstance(name, str) else ""
    return dict(content=text, filename=(safe or "scenario") + ".yaml")


def register_build(app: dash.Dash, services) -> None:
    letters = list(ROLES)

    @app.callback(
        Output("yaml", "value"), [Output(c, "value") for c in FORM_IDS],
        Output(TRACE_CONTROL, "options"),
        [Output(f"{c}-err", "children") for c in FORM_IDS], [Output(f"sec-{s}-err", "children") for s in SECTIONS],
        Output("build-msg", "children"), [Output(f"box-{x}", "style") for x in letters],
        [Output(f"note-{x}", "children") for x in letters], Output("upload", "contents"),
        Output("example", "value"),
        Input("example", "value"), Input("yaml", "n_blur"), Input("validate", "n_clicks"),
        Input("upload", "contents"), Input("load-request", "data"), [Input(c, "value") for c in FORM_IDS],
        State("upload", "filename"), State("yaml", "value"), State("session", "data"))
    def sync(example, _blur, _check, contents, load, *rest):
        values = dict(zip(FORM_IDS, rest[:len(FORM_IDS)]))
        filename, text, sid = rest[len(FORM_IDS):]
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
        try:
            sid = services.session(sid)
        except pdsim.SpecError:
            sid = None  # build_sync refuses an upload without a session
        st = build_sync(trigger, text, values, example, (contents, filename), load, services, sid)
        form = [no_update if c in st["keep"] else st["values"][c] for c in FORM_IDS]
        current = st["values"].get(TRACE_CONTROL) or values.get(TRACE_CONTROL)
        trace_opts = uploads.trace_options(services.uploads, sid, services.config.data_dir, current)
        return (st["text"] if st["text"] != text else no_update, *form, trace_opts,
                *[st["errors"][c] for c in FORM_IDS], *[st["sections"][s] for s in SECTIONS], st["message"],
                *[None if st["visible"][x] else HIDDEN for x in letters], *[st["notes"].get(x, "") for x in letters],
                None if contents else no_update, None if st["clear_example"] else no_update)

    @app.callback(Output("download", "data"), Input("download-btn", "n_clicks"), State("yaml", "value"),
                  prevent_initial_call=True)
    def download(_n, text):
        return download_file(text)
