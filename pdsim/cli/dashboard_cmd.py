"""``pdsim dashboard``: the interactive Dash app (binds 127.0.0.1 by default)."""
from __future__ import annotations

import argparse


def register(sub) -> None:
    db = sub.add_parser("dashboard", help="interactive Dash app")
    db.add_argument("--host", default="127.0.0.1", help="bind address (default: localhost only)")
    db.add_argument("--port", type=int, default=8050, help="port (default: 8050)")
    db.set_defaults(fn=run)


def run(args: argparse.Namespace) -> int:
    from ..dashboards.app import serve

    serve(host=args.host, port=args.port, debug=args.debug)
    return 0
