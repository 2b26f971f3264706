"""``pdsim dashboard``: the interactive Dash app (binds 127.0.0.1 by default).

A non-loopback ``--host`` prints what is exposed before serving; an empty one is refused (Flask
would quietly bind 127.0.0.1). Requests are answered only for the Host names the server is
reached by (loopback names, the bind address, ``--allow-host``), against DNS rebinding. ``--debug`` (the global flag)
only writes tracebacks of unexpected callback failures to the server log: the Werkzeug debugger
and reloader are never enabled."""
from __future__ import annotations

import argparse


def register(sub) -> None:
    db = sub.add_parser("dashboard", help="interactive Dash app",
                        description="Serve the dashboard: build scenarios, run them, compare runs, explore sweeps.")
    db.add_argument("--host", default="127.0.0.1",
                    help="bind address (default: 127.0.0.1, this machine only; anything else serves the network "
                         "without login, and a warning says so)")
    db.add_argument("--allow-host", metavar="NAME", action="append", default=[],
                    help="also answer requests whose Host header is NAME (repeatable); by default only "
                         "127.0.0.1, localhost, [::1] and the --host address are answered (others get HTTP 403, "
                         "so a web page cannot reach the dashboard through DNS rebinding)")
    db.add_argument("--port", type=int, default=8050, help="port (default: 8050)")
    db.add_argument("--data", metavar="DIR", default=".",
                    help="data folder (default: the working directory): the only folder besides pdsim's bundled "
                         "data whose files (traces, hardware/model YAML) scenarios may read; sweep result folders "
                         "under it are listed on the Explore tab")
    db.add_argument("--sweeps", metavar="DIR", action="append", default=[],
                    help="also list the sweep result folders in DIR on the Explore tab (repeatable)")
    db.set_defaults(fn=run)


def run(args: argparse.Namespace) -> int:
    from ..dashboards.app import serve
    from ..dashboards.config import DashboardConfig

    config = DashboardConfig.make(args.data, tuple(args.sweeps), debug=bool(getattr(args, "debug", False)),
                                  host=args.host, allow_hosts=tuple(args.allow_host))
    serve(config, port=args.port)
    return 0
