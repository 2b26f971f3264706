"""Explore tab callbacks: list the sweep folders found in the data folder, open one, draw its
frontier, heatmap and table, and load a configuration into Build (renamed after it)."""
from __future__ import annotations

import time

import dash
import plotly.graph_objects as go
from dash import Input, Output, State, html, no_update

import pdsim

from . import views
from .build_callbacks import err_span, ok_span
from .sweeps import config_text

HIDDEN = {"display": "none"}


def _placeholder(text: str) -> go.Figure:
    fig = go.Figure()
    fig.add_annotation(text=text, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper",
                       font=dict(size=14, color="#888"))
    fig.update_layout(height=220, xaxis_visible=False, yaxis_visible=False, margin=dict(t=20, b=20, l=20, r=20),
                      plot_bgcolor="white")
    return fig


def empty_explore_text(services, n_folders: int) -> list:
    cfg = services.config
    where = str(cfg.data_dir) + "".join(f", {r}" for r in cfg.sweep_roots)
    if n_folders:
        return [html.B("No sweep opened. "), f"Pick one of the {n_folders} sweep result folders found in {where} "
                "above: its Pareto frontier, a heatmap over two knobs and the table of configurations appear here."]
    return [html.B("No sweep result folders found "), f"in {where}. Write one with ",
            html.Code("pdsim sweep SWEEP.yaml --out DIR"), " with DIR inside the data folder (or start the dashboard "
            "with --sweeps DIR), then press Refresh list."]


def load_request(services, key, cid) -> tuple[dict | None, str | None]:
    """(load-request data for Build, or None; an error message, or None)."""
    if not key or not cid:
        return None, None  # nothing opened or nothing clicked: nothing to do
    try:
        sw = services.sweeps.open(key)
        text = config_text(sw, cid)
    except pdsim.SpecError as err:
        return None, str(err)
    return {"text": text, "msg": f"sweep configuration {cid} of {sw.label}", "nonce": time.time()}, None


def register_explore(app: dash.Dash, services) -> None:
    catalog = services.sweeps

    @app.callback(Output("sweep-list", "options"), Output("explore-empty", "children"),
                  Input("tabs", "value"), Input("refresh-sweeps", "n_clicks"))
    def list_folders(tab, _n):
        if dash.ctx.triggered_id == "refresh-sweeps":
            catalog.refresh()
        elif tab != "explore":
            return no_update, no_update
        opts = catalog.options()
        return opts, empty_explore_text(services, len(opts))

    @app.callback(Output("sweep-msg", "children"), Output("sweep-folder", "data"),
                  Output("heat-x", "options"), Output("heat-x", "value"), Output("heat-y", "options"),
                  Output("heat-y", "value"), Output("heat-metric", "options"), Output("heat-metric", "value"),
                  Output("explore-body", "style"), Output("explore-empty", "style"),
                  Input("sweep-list", "value"), prevent_initial_call=True)
    def open_folder(key):
        if not key:
            return None, None, [], None, [], None, [], None, HIDDEN, None
        try:
            sw = catalog.open(key)
        except pdsim.SpecError as err:
            return (err_span(str(err)), None, [], None, [], None, [], None, HIDDEN, None)
        x, y = sw.default_axes()
        axis_opts = [{"label": views.short_name(k), "value": k} for k in sw.axes]
        msg = ok_span(f"{sw.label}: {len(sw.df)} configurations ({len(sw.ok)} feasible)")
        return msg, key, axis_opts, x, axis_opts, y, sw.metrics, sw.default_metric(), None, HIDDEN

    @app.callback(Output("x-pareto", "figure"), Output("x-heatmap", "figure"), Output("x-grid", "columns"),
                  Output("x-grid", "data"), Output("x-grid", "tooltip_data"), Output("x-table-note", "children"),
                  Input("sweep-folder", "data"), Input("pareto-view", "value"), Input("heat-x", "value"),
                  Input("heat-y", "value"), Input("heat-metric", "value"), prevent_initial_call=True)
    def explore_figures(key, view, x, y, metric):
        from pdsim.report.sweep_figures import goodput_ttft_figure, heatmap_figure, pareto_figure

        empty = ([], [], [], None)
        if not key:
            return no_update, no_update, *empty
        try:
            sw = catalog.open(key)
            table = views.sweep_rows(sw, metric)
            if not len(sw.ok):
                return _placeholder("no feasible configuration in this sweep"), _placeholder(""), *table
            par = (goodput_ttft_figure(sw.df, sw.knobs) if view == "goodput_ttft"
                   else pareto_figure(sw.df, sw.frontier(view), sw.knobs))
            if x and y and metric and x != y:
                heat = heatmap_figure(sw.df, x, y, metric)
            else:
                heat = _placeholder("pick two different knobs and a metric")
            return par, heat, *table
        except pdsim.SpecError as err:
            return _placeholder(str(err)), _placeholder(""), *empty
        except (KeyError, ValueError, TypeError) as err:  # a results.csv of another shape: a message, not a 500
            return _placeholder(f"cannot draw this sweep: {type(err).__name__}: {err}"), _placeholder(""), *empty

    @app.callback(Output("load-request", "data"), Output("tabs", "value", allow_duplicate=True),
                  Output("sweep-msg", "children", allow_duplicate=True),
                  Input("x-pareto", "clickData"), Input("x-grid", "active_cell"),
                  State("sweep-folder", "data"), prevent_initial_call=True)
    def load_config(click, cell, key):
        if dash.ctx.triggered_id == "x-grid":
            if not isinstance(cell, dict) or cell.get("column_id") != views.LOAD:
                return no_update, no_update, no_update  # a click on another cell: sorting, reading
            cid = cell.get("row_id")
        else:
            try:
                cid = click["points"][0]["customdata"]
                cid = cid[0] if isinstance(cid, list) else cid
            except (TypeError, KeyError, IndexError):
                cid = None
        req, err = load_request(services, key, cid)
        if err is not None:
            return no_update, no_update, err_span(err)
        if req is None:
            return no_update, no_update, no_update
        return req, "build", no_update
