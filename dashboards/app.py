"""pdsim dashboard: build a deployment, run it in the background, see why it behaves as it does,
compare pinned runs, explore sweep results. Figures come from pdsim.report (shared with the CLI).

    pdsim dashboard [--host 127.0.0.1] [--port 8050]
"""
from __future__ import annotations

from pathlib import Path

import dash
import pandas as pd
import yaml
from dash import Input, Output, State, dcc, html, no_update

import pdsim
from pdsim.report.figures import (instance_timeline_figure, latency_cdf_figure, link_timeline_figure,
                                  request_gantt_figure, summary_rows, throughput_timeline_figure,
                                  ttft_breakdown_figure)
from pdsim.specs import catalog

from .forms import FIELDS, apply_form, example_yaml, form_values, parse_yaml, save_upload, validate
from .jobs import JobManager

JOBS = JobManager()
PINNED: dict[str, object] = {}
CARD = {"display": "inline-block", "padding": "8px 14px", "margin": "4px", "border": "1px solid #ddd",
        "borderRadius": "6px", "minWidth": "150px", "background": "#fafafa"}
ERR = {"color": "#b00020", "fontSize": "12px", "minHeight": "14px"}


def _field(cid: str, label: str, kind: str = "number", options=None, width: str = "130px"):
    if options is not None:
        ctrl = dcc.Dropdown(id=cid, options=options, clearable=False, style={"width": "180px"})
    else:
        ctrl = dcc.Input(id=cid, type=kind, debounce=True, style={"width": width})
    return html.Div([html.Label(label, style={"fontSize": "12px", "display": "block"}), ctrl,
                     html.Div(id=f"{cid}-err", className="field-error", style=ERR)],
                    style={"display": "inline-block", "verticalAlign": "top", "margin": "0 10px 6px 0"})


def _group(prefix: str, title: str):
    return html.Fieldset([html.Legend(title)] + [
        _field(f"f-{prefix}-{k}", k) for k in ("count", "nodes", "gpus", "tp", "dp", "ep")],
        style={"display": "inline-block", "margin": "4px"})


def build_tab():
    examples = catalog.scenario_keys()
    return html.Div([
        html.Div([html.Label("Start from example: "),
                  dcc.Dropdown(id="example", options=examples, value="llama8b-a800-colocated", clearable=False,
                               style={"width": "340px", "display": "inline-block", "verticalAlign": "middle"})]),
        html.Div([_field("f-hardware", "hardware", options=catalog.hardware_keys()),
                  _field("f-model", "model", options=catalog.model_keys()),
                  _field("f-backend", "KV transfer", options=["mooncake", "nccl"]),
                  _field("f-nic", "NIC Gb/s (what-if)")]),
        _group("p", "prefill group"), _group("d", "decode group"),
        html.Fieldset([html.Legend("colocated group")] + [_field(f"f-c-{k}", k) for k in ("count", "nodes", "gpus", "tp")],
                      style={"display": "inline-block", "margin": "4px"}),
        html.Div([_field("f-chunk", "chunked_prefill_size"), _field("f-mrr", "max_running_requests"),
                  _field("f-page", "page_size"),
                  _field("f-wl-kind", "workload", options=["synthetic", "trace", "fixed_batch", "multi_turn", "tool_agent"]),
                  _field("f-rate", "rate (req/s)"), _field("f-nreq", "requests"),
                  _field("f-ttft", "SLO TTFT ms"), _field("f-tpot", "SLO TPOT ms"), _field("f-seed", "seed")]),
        html.Div([html.Button("Apply form to YAML", id="apply-form"), " ",
                  html.Button("Validate", id="validate"), " ",
                  html.Button("Download YAML", id="download-btn"), dcc.Download(id="download"), " ",
                  dcc.Upload(id="upload", children=html.Button("Upload trace (.jsonl/.csv)"),
                             style={"display": "inline-block"}, max_size=20 * 2**20)]),
        html.Div(id="build-msg", style={"margin": "6px 0", "whiteSpace": "pre-wrap"}),
        dcc.Textarea(id="yaml", style={"width": "100%", "height": "320px", "fontFamily": "monospace"}),
    ])


def run_tab():
    return html.Div([
        html.Button("Run", id="run"), " ", html.Button("Cancel", id="cancel"), " ",
        html.Button("Pin this run for comparison", id="pin"),
        html.Div(id="progress", style={"margin": "8px 0"}),
        dcc.Interval(id="poll", interval=500, disabled=True),
        html.Div(id="cards"),
        dcc.Graph(id="g-cdf"), dcc.Graph(id="g-breakdown"), dcc.Graph(id="g-throughput"),
        dcc.Graph(id="g-instances"), dcc.Graph(id="g-links"), dcc.Graph(id="g-gantt"),
    ])


def compare_tab():
    return html.Div([html.Button("Clear pinned runs", id="clear-pins"), html.Div(id="pins"),
                     dcc.Graph(id="c-cdf"), dcc.Graph(id="c-breakdown")])


def explore_tab():
    return html.Div([
        html.Label("Sweep result folder (on this machine): "),
        dcc.Input(id="sweep-dir", type="text", debounce=True, style={"width": "480px"}),
        html.Div(id="sweep-msg", style={"margin": "6px 0"}),
        dcc.Graph(id="x-pareto"), dcc.Graph(id="x-heatmap"),
    ])


def create_app() -> dash.Dash:
    app = dash.Dash(__name__, title="pdsim dashboard", suppress_callback_exceptions=True)
    app.layout = html.Div([
        html.H2("pdsim: disaggregated serving simulator"),
        dcc.Store(id="job-id"), dcc.Store(id="active-job"),
        dcc.Tabs(id="tabs", value="build", children=[
            dcc.Tab(label="Build", value="build", children=build_tab()),
            dcc.Tab(label="Run & see", value="run", children=run_tab()),
            dcc.Tab(label="Compare", value="compare", children=compare_tab()),
            dcc.Tab(label="Explore sweeps", value="explore", children=explore_tab()),
        ]),
    ], style={"fontFamily": "sans-serif", "margin": "12px"})
    register(app)
    return app


FORM_IDS = list(FIELDS)


def register(app: dash.Dash) -> None:
    @app.callback(Output("yaml", "value"), Input("example", "value"))
    def load_example(key):
        return example_yaml(key)

    @app.callback([Output(c, "value") for c in FORM_IDS], Input("yaml", "value"))
    def yaml_to_form(text):
        try:
            values = form_values(parse_yaml(text or ""))
        except pdsim.SpecError:
            return [no_update] * len(FORM_IDS)
        return [values[c] for c in FORM_IDS]

    @app.callback(Output("yaml", "value", allow_duplicate=True), Output("build-msg", "children", allow_duplicate=True),
                  [Output(f"{c}-err", "children", allow_duplicate=True) for c in FORM_IDS],
                  Input("apply-form", "n_clicks"), Input("validate", "n_clicks"), State("yaml", "value"),
                  [State(c, "value") for c in FORM_IDS], prevent_initial_call=True)
    def apply_and_validate(_a, _v, text, *values):
        errs = [""] * len(FORM_IDS)
        try:
            data = parse_yaml(text or "")
        except pdsim.SpecError as err:
            return no_update, html.Span(str(err), style=ERR), *errs
        new_text = text
        if dash.ctx.triggered_id == "apply-form":
            try:
                data = apply_form(data, dict(zip(FORM_IDS, values)))
            except pdsim.SpecError as err:
                return no_update, html.Span(str(err), style=ERR), *errs
            new_text = yaml.safe_dump(data, sort_keys=False)
        resolved, msg, control = validate(new_text)
        if msg:
            if control in FORM_IDS:
                errs[FORM_IDS.index(control)] = msg
            return new_text, html.Span(msg, style=ERR), *errs
        gpus = sum(g.count * g.gpus_per_instance(resolved.hardware.gpus_per_node)
                   for _r, _i, g in resolved.scenario.cluster.groups())
        return new_text, html.Span(f"OK: {resolved.name}, {gpus} GPUs of {resolved.hardware.name}", style={"color": "green"}), *errs

    @app.callback(Output("download", "data"), Input("download-btn", "n_clicks"), State("yaml", "value"),
                  prevent_initial_call=True)
    def download(_n, text):
        name = (parse_yaml(text or "").get("name") or "scenario") if text else "scenario"
        return dict(content=text or "", filename=f"{name}.yaml")

    @app.callback(Output("yaml", "value", allow_duplicate=True), Output("build-msg", "children", allow_duplicate=True),
                  Input("upload", "contents"), State("upload", "filename"), State("yaml", "value"),
                  prevent_initial_call=True)
    def upload(contents, filename, text):
        try:
            path, n = save_upload(contents, filename)
            data = parse_yaml(text or "")
        except pdsim.SpecError as err:
            return no_update, html.Span(str(err), style=ERR)
        data["workload"] = {"kind": "trace", "trace": {"path": str(path), "format": "auto"}}
        return yaml.safe_dump(data, sort_keys=False), html.Span(f"uploaded {filename}: {n} requests", style={"color": "green"})

    @app.callback(Output("active-job", "data"), Output("poll", "disabled"), Output("progress", "children"),
                  Input("run", "n_clicks"), State("yaml", "value"), prevent_initial_call=True)
    def run(_n, text):
        resolved, msg, _c = validate(text or "")
        if msg:
            return no_update, True, html.Span(msg, style=ERR)
        return JOBS.start(resolved), False, "started..."

    @app.callback(Output("progress", "children", allow_duplicate=True), Input("cancel", "n_clicks"),
                  State("active-job", "data"), prevent_initial_call=True)
    def cancel(_n, jid):
        JOBS.cancel(jid)
        return "cancelling..."

    @app.callback(Output("progress", "children", allow_duplicate=True), Output("poll", "disabled", allow_duplicate=True),
                  Output("job-id", "data"), Input("poll", "n_intervals"), State("active-job", "data"),
                  prevent_initial_call=True)
    def poll(_n, jid):
        job = JOBS.get(jid)
        if job is None:
            return "", True, no_update
        if job.status == "running":
            pct = 100 * job.done / job.total if job.total else 0
            return (html.Div([html.Progress(value=str(pct), max="100", style={"width": "300px"}),
                              f" {job.done}/{job.total} requests, simulated {job.sim_s:,.0f} s in {job.wall_s:.1f} s"]),
                    False, no_update)
        if job.status == "done":
            return f"done: {job.name} in {job.wall_s:.1f} s", True, jid
        return html.Span(f"{job.status}: {job.error or ''}", style=ERR), True, no_update

    @app.callback(Output("cards", "children"), Output("g-cdf", "figure"), Output("g-breakdown", "figure"),
                  Output("g-throughput", "figure"), Output("g-instances", "figure"), Output("g-links", "figure"),
                  Output("g-gantt", "figure"), Input("job-id", "data"), prevent_initial_call=True)
    def show(jid):
        job = JOBS.get(jid)
        if job is None or job.result is None:
            return (no_update,) * 7
        res = job.result
        s = res.summary()
        cards = [html.Div([html.Div(label, style={"fontSize": "11px", "color": "#555"}),
                           html.Div(value, style={"fontSize": "18px"})], style=CARD) for label, value in summary_rows(s)]
        return (cards, latency_cdf_figure(res), ttft_breakdown_figure(res), throughput_timeline_figure(res),
                instance_timeline_figure(res), link_timeline_figure(res), request_gantt_figure(res))

    @app.callback(Output("pins", "children"), Output("c-cdf", "figure"), Output("c-breakdown", "figure"),
                  Input("pin", "n_clicks"), Input("clear-pins", "n_clicks"), State("job-id", "data"),
                  prevent_initial_call=True)
    def pins(_p, _c, jid):
        if dash.ctx.triggered_id == "clear-pins":
            PINNED.clear()
        else:
            job = JOBS.get(jid)
            if job is not None and job.result is not None:
                label = f"{job.name} [{job.jid[:4]}]"
                PINNED[label] = job.result
        if not PINNED:
            return "no pinned runs", {}, {}
        return (html.Ul([html.Li(k) for k in PINNED]), latency_cdf_figure(PINNED), ttft_breakdown_figure(PINNED))

    @app.callback(Output("sweep-msg", "children"), Output("x-pareto", "figure"), Output("x-heatmap", "figure"),
                  Input("sweep-dir", "value"), prevent_initial_call=True)
    def explore(folder):
        from pdsim.explore.pareto import frontier
        from pdsim.explore.sweep import _knob_columns
        from pdsim.report.sweep_figures import heatmap_figure, pareto_figure

        p = Path(folder or "").expanduser()
        if not p.is_dir() or not (p / "results.csv").is_file():
            return html.Span(f"{folder}: not a sweep result folder (no results.csv)", style=ERR), {}, {}
        df = pd.read_csv(p / "results.csv")
        ok = df[df["status"] == "ok"]
        knobs = _knob_columns(df)
        par = frontier(ok, "output_throughput_per_gpu", "tokens_per_s_per_user")
        numeric = [k for k in knobs if pd.api.types.is_numeric_dtype(df[k]) and df[k].nunique() > 1]
        heat = heatmap_figure(df, numeric[0], numeric[1], "request_goodput") if len(numeric) >= 2 else {}
        return f"{len(df)} configurations ({len(ok)} feasible); click a point to load it", pareto_figure(df, par, knobs), heat

    @app.callback(Output("yaml", "value", allow_duplicate=True), Output("tabs", "value"),
                  Output("build-msg", "children", allow_duplicate=True), Input("x-pareto", "clickData"),
                  State("sweep-dir", "value"), prevent_initial_call=True)
    def load_point(click, folder):
        try:
            cid = str(click["points"][0]["customdata"])
        except (TypeError, KeyError, IndexError):
            return no_update, no_update, no_update
        if not cid.isalnum():
            return no_update, no_update, no_update
        cfg = Path(folder).expanduser() / "configs" / f"{cid}.yaml"
        if not cfg.is_file():
            return no_update, no_update, html.Span(f"no configs/{cid}.yaml", style=ERR)
        return cfg.read_text(), "build", f"loaded sweep configuration {cid}"


def serve(host: str = "127.0.0.1", port: int = 8050, debug: bool = False) -> None:
    app = create_app()
    print(f"pdsim dashboard on http://{host}:{port}/ (Ctrl-C to stop)")
    app.run(host=host, port=port, debug=debug)


if __name__ == "__main__":  # pragma: no cover
    serve()
