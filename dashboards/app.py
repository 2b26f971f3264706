"""pdsim dashboard: build a deployment, run it in the background, see why it behaves as it does,
compare pinned runs, explore sweep results. Figures come from pdsim.report (shared with the CLI).

    pdsim dashboard [--host 127.0.0.1] [--port 8050]

Modules: forms (scenario <-> form, validation), uploads (safe uploads), jobs (background runs in worker
processes), layout (the page), callbacks (the glue), views (cards and tables), sweeps (reading
sweep result folders).
"""
from __future__ import annotations

import threading

import dash

from . import layout
from .callbacks import register
from .uploads import MAX_UPLOAD_BYTES
from .jobs import JobManager

_JOBS: JobManager | None = None
_LOCK = threading.Lock()


def job_manager() -> JobManager:
    """The process-wide job manager (created on first use)."""
    global _JOBS
    with _LOCK:
        if _JOBS is None:
            _JOBS = JobManager()
        return _JOBS


def create_app(jobs: JobManager | None = None) -> dash.Dash:
    app = dash.Dash(__name__, title="pdsim dashboard", suppress_callback_exceptions=True, update_title=None)
    app.index_string = layout.INDEX
    # request bodies: an upload of MAX_UPLOAD_BYTES is ~4/3 larger in base64, plus the JSON around it
    app.server.config["MAX_CONTENT_LENGTH"] = MAX_UPLOAD_BYTES * 3 // 2 + 2**20
    app.layout = layout.page()
    register(app, jobs or job_manager())
    return app


def serve(host: str = "127.0.0.1", port: int = 8050, debug: bool = False) -> None:
    """Serve the dashboard (localhost only unless ``host`` says otherwise)."""
    app = create_app()
    job_manager().warm_up()
    print(f"pdsim dashboard on http://{host}:{port}/ (Ctrl-C to stop)")
    try:
        app.run(host=host, port=port, debug=debug, use_reloader=False)
    finally:
        job_manager().shutdown()


if __name__ == "__main__":  # pragma: no cover
    serve()
