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

import logging
import sys
import traceback

import dash
from dash import Input, Output, html

from . import layout
from .build_callbacks import register_build
from .config import DashboardConfig
from .explore_callbacks import register_explore
from .exposure import exposure_warning
from .jobs import JobManager
from .plan_callbacks import register_plan
from .run_callbacks import register_run
from .services import Services

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
    app.layout = lambda: layout.page(config.limits)
    register_build(app, services)
    register_run(app, services)
    register_explore(app, services)
    register_plan(app, services)

    @app.callback(Output("app-error", "children", allow_duplicate=True), Input("app-error", "n_clicks"),
                  prevent_initial_call=True)
    def dismiss_error(_n):
        return None

    app.pdsim_services = services
    return app


def serve(config: DashboardConfig, host: str = "127.0.0.1", port: int = 8050) -> None:
    """Serve the dashboard with Werkzeug's threaded server. Never in Flask debug mode: no
    debugger, no reloader, no tracebacks to clients (``config.debug`` only logs them here)."""
    warning = exposure_warning(host, port, str(config.data_dir))
    if warning:
        print(warning, file=sys.stderr)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    app = create_app(config)
    services: Services = app.pdsim_services
    services.jobs.warm_up()
    roots = "".join(f", {r}" for r in config.sweep_roots)
    print(f"pdsim dashboard on http://{host}:{port}/ (Ctrl-C to stop)\n"
          f"  data folder: {config.data_dir} (scenarios may read files here; sweep folders are listed from here"
          f"{roots})", file=sys.stderr)
    try:
        app.run(host=host, port=port, debug=False, use_reloader=False, dev_tools_ui=False,
                dev_tools_hot_reload=False, threaded=True)
    finally:
        services.close()


if __name__ == "__main__":  # pragma: no cover
    serve(DashboardConfig.make())
