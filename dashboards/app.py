"""pdsim dashboard: build a deployment, run it in the background, see why it behaves as it does,
compare pinned runs, explore sweep results. Figures come from pdsim.report (shared with the CLI).

    pdsim dashboard [--host 127.0.0.1] [--port 8050] [--data DIR] [--sweeps DIR ...]

Modules: config (data folder, limits), exposure (bind warning), sessions / jobs / uploads
(per-browser-session state, bounded), services (all of it together), forms (scenario <-> form),
validation (sandboxed validation, error routing), layout (the page), panels (the run's result
sections), views (cards, tables, empty states), sweeps / folders (sweep folders found in the
data folder), build_callbacks / run_callbacks / explore_callbacks (the glue).
"""
from __future__ import annotations

import dataclasses
import logging
import signal
import sys
import traceback

import dash
import flask
from dash import Input, Output, html
from dash.exceptions import PreventUpdate

from . import layout
from .build_callbacks import register_build
from .config import DashboardConfig, check_bind_host
from .explore_callbacks import register_explore
from .exposure import allowed_hosts, exposure_warning, host_refusal
from .jobs import JobManager
from .plan_callbacks import register_plan
from .run_callbacks import register_run
from .services import Services
from .sessions import is_issued, new_session_id

log = logging.getLogger("pdsim.dashboard")


def request_body_limit(config: DashboardConfig) -> int:
    """Flask's MAX_CONTENT_LENGTH: the largest upload the page sends (base64: 4/3 larger) plus
    the JSON around it. Werkzeug refuses longer bodies (HTTP 413) before reading them."""
    return layout.client_upload_cap(config.limits) * 4 // 3 + 2 * 2**20


def _error_handler(config: DashboardConfig):
    def on_error(err: Exception):
        """Any unexpected failure in a callback: one line on the page, the traceback in the server
        log (with --debug), never an HTTP 500 or a traceback sent to the browser."""
        where = dash.ctx.triggered_id if dash.ctx else None
        log.error("callback failed (trigger %s): %s: %s", where, type(err).__name__, err)
        if config.debug:
            traceback.print_exception(type(err), err, err.__traceback__, file=sys.stderr)
        dash.set_props("app-error", {"children": html.Span(
            f"internal error: {type(err).__name__} while handling {where or 'the page'}; nothing was changed. "
            "The server log has the details. (Click to dismiss.)")})
        return None  # no_update for every output

    return on_error


def guard_hosts(server: flask.Flask, config: DashboardConfig) -> None:
    """Answer only requests whose Host header names this server (exposure.py; DNS rebinding):
    anything else gets HTTP 403 before Dash sees it."""
    allowed = allowed_hosts(config.host, config.allow_hosts)

    @server.before_request
    def check_host():
        why = host_refusal(flask.request.headers.get("Host"), allowed)
        if why is not None:
            return flask.Response(why + "\n", status=403, mimetype="text/plain")
        return None


def register_session_renewal(app: dash.Dash) -> None:
    """A page whose session id this server did not issue (a tab kept across a server restart,
    or a made-up id) is given a fresh one, so it recovers without the user clearing storage."""
    @app.callback(Output("session", "data"), Input("session", "data"))
    def renew_session(sid):
        if is_issued(sid):
            raise PreventUpdate
        return new_session_id()


def create_app(config: DashboardConfig | None = None, jobs: JobManager | None = None,
               services: Services | None = None) -> dash.Dash:
    """The Dash app. ``config``: data folder and limits (default: the working directory);
    ``services`` (or ``jobs``) may be given by tests. The app's ``Services`` are at
    ``app.pdsim_services``."""
    config = config or (services.config if services else DashboardConfig.make())
    services = services or Services.make(config, jobs)
    app = dash.Dash(__name__, title="pdsim dashboard", suppress_callback_exceptions=True, update_title=None,
                    on_error=_error_handler(config))
    app.index_string = layout.INDEX
    app.server.config["MAX_CONTENT_LENGTH"] = request_body_limit(config)
    guard_hosts(app.server, config)
    app.layout = lambda: layout.page(config.limits)
    register_build(app, services)
    register_run(app, services)
    register_explore(app, services)
    register_plan(app, services)
    register_session_renewal(app)

    @app.callback(Output("app-error", "children", allow_duplicate=True), Input("app-error", "n_clicks"),
                  prevent_initial_call=True)
    def dismiss_error(_n):
        return None

    app.pdsim_services = services
    return app


def serve(config: DashboardConfig, host: str | None = None, port: int = 8050) -> None:
    """Serve the dashboard with Werkzeug's threaded server. Never in Flask debug mode: no
    debugger, no reloader, no tracebacks to clients (``config.debug`` only logs them here).
    SIGTERM (service managers, ``timeout``) stops it like Ctrl-C: runs cancelled, the upload
    folder removed. ``host``: the bind address (default ``config.host``)."""
    if host is not None and host != config.host:
        config = dataclasses.replace(config, host=check_bind_host(host))
    host = config.host
    warning = exposure_warning(host, port, str(config.data_dir))
    if warning:
        print(warning, file=sys.stderr)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    app = create_app(config)
    services: Services = app.pdsim_services
    services.jobs.warm_up()
    try:
        previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    except ValueError:  # not the main thread (an embedding program): its own handlers stay
        previous = None
    roots = "".join(f", {r}" for r in config.sweep_roots)
    print(f"pdsim dashboard on http://{host}:{port}/ (Ctrl-C to stop)\n"
          f"  data folder: {config.data_dir} (scenarios may read files here; sweep folders are listed from here"
          f"{roots})", file=sys.stderr)
    if warning:
        names = ", ".join(sorted(allowed_hosts(host, config.allow_hosts)))
        print(f"  answers requests for the host names {names} (more with --allow-host NAME)", file=sys.stderr)
    try:
        app.run(host=host, port=port, debug=False, use_reloader=False, dev_tools_ui=False,
                dev_tools_hot_reload=False, threaded=True)
    finally:
        services.close()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _exit_on_sigterm(_signum, _frame):
    raise SystemExit(0)  # unwinds serve()'s finally: the cleanup Ctrl-C gets


if __name__ == "__main__":  # pragma: no cover
    serve(DashboardConfig.make())
