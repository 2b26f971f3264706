"""Page layout: Build, Run & see, Compare and Explore tabs. Form controls are generated from
``forms.FIELDS`` so each one carries the id its callbacks and error messages use."""
from __future__ import annotations

from dash import dcc, html

from pdsim.specs import catalog

from . import forms, views
from .config import Limits
from .sessions import new_session_id
from .sweep_jobs import MAX_CONFIGS as MAX_SWEEP

CSS = """
body { font-family: system-ui, -apple-system, Segoe UI, Roboto, sans-serif; margin: 0; color: #222; }
.page { margin: 10px 16px; }
h2 { margin: 6px 0 8px 0; font-weight: 600; }
.toolbar { display: flex; flex-wrap: wrap; gap: 8px; align-items: center; margin: 8px 0; }
.toolbar .grow { flex: 1; }
.build { display: grid; grid-template-columns: minmax(0, 3fr) minmax(320px, 2fr); gap: 12px; }
.editor { position: sticky; top: 6px; align-self: start; }
fieldset { border: 1px solid #d5d8dc; border-radius: 6px; margin: 0 0 8px 0; padding: 4px 8px 2px 8px; }
legend { font-weight: 600; font-size: 13px; padding: 0 4px; }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(150px, 1fr)); gap: 0 10px; }
.ctl label.lbl { font-size: 11px; color: #555; display: block; white-space: nowrap; overflow: hidden;
                 text-overflow: ellipsis; }
.ctl input[type=text], .ctl input[type=number] { width: 100%; box-sizing: border-box; }
.ctl .err, .sec-err { color: #b00020; font-size: 11px; min-height: 12px; overflow-wrap: anywhere; }
.sec-err:empty, .note:empty { display: none; }
.note { font-size: 11px; color: #7a5c00; }
.sub { font-size: 11px; font-weight: 600; color: #445; margin: 4px 0 0 0; border-top: 1px dashed #e0e0e0; }
#build-msg { margin: 0 0 8px 0; font-size: 13px; min-height: 18px; }
.msg-ok { color: #1b7f3a; } .msg-err { color: #b00020; white-space: pre-wrap; }
#yaml { width: 100%; height: calc(100vh - 60px); min-height: 400px; box-sizing: border-box;
        font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 12px; }
button { padding: 5px 12px; border-radius: 5px; border: 1px solid #aab; background: #f5f6f8; cursor: pointer; }
button.primary { background: #1f6feb; color: white; border-color: #1f6feb; }
button.danger { background: #fff; color: #b00020; border-color: #b00020; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(170px, 1fr)); gap: 6px; margin: 8px 0; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: 6px 10px; background: #fafafa; }
.card.good { border-color: #3a9b5c; background: #f1faf3; } .card.bad { border-color: #d9534f; background: #fdf2f2; }
.card.headline { background: #f2f6fd; border-color: #9db8e6; }
.card-label { font-size: 11px; color: #555; } .card-value { font-size: 19px; }
.card-note { font-size: 10px; color: #777; }
.banner { padding: 6px 10px; border-radius: 6px; margin: 6px 0; font-weight: 600; }
.banner.good { background: #e6f5ea; color: #1b5e20; } .banner.bad { background: #fdecea; color: #8a1c14; }
.run-header { margin: 6px 0; }
.two { display: grid; grid-template-columns: minmax(0, 1fr) minmax(0, 1fr); gap: 8px; }
.table { border-collapse: collapse; font-size: 12px; margin: 6px 0; }
.table td, .table th { border-bottom: 1px solid #e3e3e3; padding: 2px 10px; text-align: right; }
.table td:first-child, .table th:first-child { text-align: left; }
.hint { font-size: 12px; color: #666; }
.table button.load { padding: 0 6px; font-size: 11px; }
.table tr:hover td { background: #f3f6fb; }
progress { width: 260px; vertical-align: middle; }
.empty { border: 1px dashed #c5cad3; border-radius: 6px; padding: 18px 20px; margin: 10px 0; color: #555;
         background: #fafbfc; font-size: 13px; line-height: 1.5; }
.empty b { color: #333; }
.section-title { font-size: 14px; font-weight: 600; margin: 14px 0 4px 0; color: #334; }
.window { margin: 0 20px 10px 80px; }
#app-error:empty { display: none; }
.panel { border: 1px solid #d5d8dc; border-radius: 6px; padding: 6px 10px; margin: 6px 0; background: #fcfcfd; }
.panel pre { max-height: 420px; overflow: auto; background: #f6f8fa; padding: 8px; font-size: 11px; margin: 6px 0; }
button.apply { padding: 1px 8px; font-size: 11px; margin-top: 3px; }
.downloads button { padding: 3px 8px; font-size: 12px; }
#app-error { background: #fdecea; color: #8a1c14; padding: 6px 10px; border-radius: 6px; margin: 6px 0;
             cursor: pointer; }
"""

INDEX = """<!DOCTYPE html>
<html><head>{%metas%}<title>{%title%}</title>{%favicon%}{%css%}<style>""" + CSS + """</style></head>
<body>{%app_entry%}<footer>{%config%}{%scripts%}{%renderer%}</footer></body></html>"""


def control(cid: str):
    f = forms.FIELDS[cid]
    placeholder = "" if f.default is None else str(f.default)
    if f.clear == "null":
        placeholder = "not checked"
    if f.kind == "layout":
        ctrl = dcc.RadioItems(id=cid, options=list(forms.LAYOUTS), inline=True,
                              inputStyle={"marginRight": "4px"}, labelStyle={"marginRight": "12px"})
    elif f.kind == "select":
        ctrl = dcc.Dropdown(id=cid, options=forms.select_options(cid), placeholder=placeholder or "choose...",
                            clearable=cid not in ("f-hardware", "f-model"), optionHeight=28)
    elif f.kind == "bool":
        ctrl = dcc.Checklist(id=cid, options=[{"label": f" {f.label}", "value": "on"}], value=[])
    else:
        ctrl = dcc.Input(id=cid, type="number" if f.kind == "number" else "text", debounce=True,
                         placeholder=placeholder)
    label = "" if f.kind == "bool" else f.label
    return html.Div([html.Label(label, className="lbl", title=f.path), ctrl,
                     html.Div(id=f"{cid}-err", className="err")],
                    className="ctl", style={"gridColumn": "span 2"} if cid in ("f-layout", "f-workload-trace-path")
                    else None)


def _section(sid: str, title: str, cids: list[str], rows: list[tuple[str, list[str]]] | None = None):
    body = [html.Legend(title), html.Div(id=f"sec-{sid}-err", className="sec-err")]
    if sid in forms.ROLES:
        body.append(html.Div(id=f"note-{sid}", className="note"))
    body.append(html.Div([control(c) for c in cids], className="grid"))
    for caption, row in rows or []:
        body.append(html.Div(caption, className="sub"))
        body.append(html.Div([control(c) for c in row], className="grid"))
    return html.Fieldset(body, id=f"box-{sid}")


def _path(cid: str) -> str:
    return forms.FIELDS[cid].path


def _ids(section: str, prefix: str = "") -> list[str]:
    return [c for c, f in forms.FIELDS.items() if f.section == section and f.path.startswith(prefix)]


def client_upload_cap(limits: Limits) -> int:
    """Largest file the browser sends: a little over the limit, so a slightly larger file gets
    the server's message (file size and limit) rather than a silent refusal."""
    return limits.max_upload_bytes * 5 // 4


def launch_panel():
    """Launch commands of the scenario in the editor (hidden until Launch commands is pressed)."""
    return html.Div([
        html.Div([html.B("Launch commands"), html.Span(" for the scenario in the editor, with the knobs pdsim "
                                                       "simulated:", className="hint"),
                  dcc.RadioItems(id="launch-engine", value="sglang", inline=True,
                                 options=[{"label": " SGLang (Mooncake P/D)  ", "value": "sglang"},
                                          {"label": " vLLM (P2P NCCL xPyD)", "value": "vllm"}]),
                  html.Div(className="grow"),
                  html.Button("Download launch.sh", id="launch-download-btn"), dcc.Download(id="launch-download"),
                  html.Button("Close", id="launch-close")], className="toolbar"),
        html.Div(id="launch-msg"),
        html.Pre(id="launch-text"),
    ], id="launch-panel", className="panel", style={"display": "none"})


def build_tab(limits: Limits):
    wl = _ids("workload")
    form = html.Div([
        _section("general", "Deployment", _ids("general")),
        _section("p", "Prefill group", _ids("p")),
        _section("d", "Decode group", _ids("d")),
        _section("c", "Colocated group (prefill + decode in one engine)", _ids("c")),
        _section("transfer", "Routing and KV transfer", _ids("transfer")),
        _section("workload", "Workload", [c for c in wl if _path(c).count(".") == 1],
                 [("trace replay (kind: trace)", [c for c in wl if ".trace." in _path(c)]),
                  ("input tokens (generators)", [c for c in wl if ".input." in _path(c)]),
                  ("output tokens (generators)", [c for c in wl if ".output." in _path(c)])]),
        _section("slo", "SLO (a request meets it when every bound holds)", _ids("slo")),
    ])
    editor = html.Div([
        html.Div([html.B("Scenario YAML"), html.Span("  edits here reach the form when you leave the box",
                                                     className="hint")]),
        dcc.Textarea(id="yaml", spellCheck=False, wrap="off"),
    ], className="editor")
    return html.Div([
        html.Div([
            html.Label("Start from example:"),
            dcc.Dropdown(id="example", options=catalog.scenario_keys(), value="llama8b-a800-colocated",
                         clearable=False, placeholder="pick an example...",
                         style={"width": "300px"}),
            dcc.Upload(id="upload", multiple=False, max_size=client_upload_cap(limits),
                       children=html.Button(f"Upload scenario .yaml or trace .jsonl/.csv "
                                            f"(up to {limits.max_upload_bytes / 2**20:g} MiB)")),
            html.Button("Download YAML", id="download-btn"), dcc.Download(id="download"),
            html.Button("Launch commands", id="launch-btn", title="the SGLang / vLLM commands that start this "
                        "deployment (pdsim launch)"),
            html.Button("Check", id="validate"),
            html.Button("Run ▶", id="build-run", className="primary"),
        ], className="toolbar"),
        html.Div(id="build-msg"),
        launch_panel(),
        html.Div([form, editor], className="build"),
    ])


def run_tab():
    return html.Div([
        html.Div([
            html.Button("Run ▶", id="run", className="primary"),
            html.Button("Cancel", id="cancel", className="danger"),
            html.Div(className="grow"),
            html.Label("showing run:"),
            dcc.Dropdown(id="run-select", options=[], placeholder="choose a finished run", clearable=False,
                         style={"width": "380px"}),
            html.Button("Pin to Compare", id="pin"),
        ], className="toolbar"),
        html.Div([html.Span("Download the run shown:", className="hint"),
                  html.Button("requests .parquet", id="dl-parquet"), html.Button("requests .csv", id="dl-csv"),
                  html.Button("report .html", id="dl-html"), dcc.Download(id="run-download"),
                  html.Span(id="dl-msg", className="hint")], className="toolbar downloads"),
        html.Div(id="progress"),
        dcc.Interval(id="poll", interval=400, disabled=True),
        html.Div(views.empty_state(views.NO_RUN), id="results"),
    ])


def compare_tab():
    return html.Div([
        html.Div([html.Label("Runs to overlay:"),
                  dcc.Dropdown(id="compare-select", options=[], value=[], multi=True,
                               placeholder="pin runs from Run & see, or pick them here", style={"minWidth": "600px"}),
                  html.Button("Clear", id="clear-pins"), html.Div(id="pin-msg", className="hint")],
                 className="toolbar"),
        views.empty_state(views.NO_PINS, "compare-empty"),
        html.Div(id="compare-table"),
        html.Div([
            dcc.Graph(id="c-cdf"),
            html.Div([dcc.Graph(id="c-breakdown"), dcc.Graph(id="c-throughput")], className="two"),
        ], id="compare-body", style={"display": "none"}),
    ])


SWEEP_KNOBS = [c for c in forms.FIELDS if forms.FIELDS[c].kind == "number" and c not in ("f-seed",)]


def sweep_knob_options() -> list[dict]:
    """Numeric scenario fields a sweep from the page can span (as pdsim sweep names them)."""
    names = {"general": "", "p": "prefill ", "d": "decode ", "c": "colocated ", "transfer": "transfer ",
             "workload": "workload ", "slo": "SLO "}
    opts = []
    for c in SWEEP_KNOBS:
        f = forms.FIELDS[c]
        opts.append({"label": f"{names.get(f.section, '')}{f.label}", "value": f.path.replace("[0]", "")})
    return opts


def sweep_panel():
    knobs = sweep_knob_options()

    def axis(n: int):
        return html.Div([html.Label(f"axis {n}:"),
                         dcc.Dropdown(id=f"sw-field-{n}", options=knobs, placeholder="knob...",
                                      style={"width": "300px"}, optionHeight=28),
                         dcc.Input(id=f"sw-values-{n}", type="text", placeholder="values, e.g. 1, 2, 4",
                                   debounce=False, style={"width": "180px"})], className="toolbar")

    return html.Div([
        html.Div([html.B("Run a sweep"), html.Span(" of the scenario in Build over one or two knobs (at most "
                                                   f"{MAX_SWEEP} configurations; pdsim sweep runs larger ones):",
                                                   className="hint")]),
        axis(1), axis(2),
        html.Div([html.Button("Start sweep ▶", id="sweep-start", className="primary"),
                  html.Button("Cancel sweep", id="sweep-cancel", className="danger"),
                  html.Div(id="sweep-progress", className="grow")], className="toolbar"),
        dcc.Interval(id="sweep-poll", interval=500, disabled=True),
    ], id="sweep-panel", className="panel")


def explore_tab():
    return html.Div([
        sweep_panel(),
        html.Div([html.Label("Sweep result folder:"),
                  dcc.Dropdown(id="sweep-list", options=[], placeholder="pick a folder written by pdsim sweep --out",
                               style={"width": "520px"}, optionHeight=28),
                  html.Button("Refresh list", id="refresh-sweeps"), html.Div(id="sweep-msg", className="grow")],
                 className="toolbar"),
        html.Div(id="explore-empty", className="empty"),
        html.Div([
            html.Div([html.Label("frontier:"),
                      dcc.RadioItems(id="pareto-view", inline=True, value="throughput",
                                     options=[{"label": " throughput/GPU vs per user  ", "value": "throughput"},
                                              {"label": " goodput vs p90 TTFT", "value": "goodput_ttft"}]),
                      html.Label("heatmap:"),
                      dcc.Dropdown(id="heat-x", placeholder="x knob", style={"width": "280px"}),
                      dcc.Dropdown(id="heat-y", placeholder="y knob", style={"width": "280px"}),
                      dcc.Dropdown(id="heat-metric", placeholder="metric", style={"width": "240px"})],
                     className="toolbar"),
            html.Div("Click a point, or a row's load ▸ cell, to load that configuration into Build "
                     "(renamed after the configuration).", className="hint"),
            dcc.Graph(id="x-pareto"), dcc.Graph(id="x-heatmap"),
            html.Div([html.Div(id="x-table-note", className="hint"), views.sweep_grid()], id="x-table"),
        ], id="explore-body", style={"display": "none"}),
    ])


def page(limits: Limits | None = None):
    """The page, built per page load so each browser tab gets its own session id (kept in the
    tab's sessionStorage across reloads)."""
    limits = limits or Limits()
    return html.Div([
        html.H2("pdsim: prefill/decode-disaggregated serving simulator"),
        dcc.Store(id="session", storage_type="session", data=new_session_id()),
        dcc.Store(id="active-job"), dcc.Store(id="sweep-folder"), dcc.Store(id="load-request"),
        dcc.Store(id="applied", data={}), dcc.Store(id="sweep-job"),
        html.Div(id="app-error"),
        dcc.Tabs(id="tabs", value="build", children=[
            dcc.Tab(label="Build", value="build", children=build_tab(limits)),
            dcc.Tab(label="Run & see", value="run", children=run_tab()),
            dcc.Tab(label="Compare", value="compare", children=compare_tab()),
            dcc.Tab(label="Explore sweeps", value="explore", children=explore_tab()),
        ]),
    ], className="page")
