"""``pdsim compare A B ...``: the same workload through several scenarios, side by side."""
from __future__ import annotations

import argparse


def register(sub) -> None:
    from .run_cmd import add_allow_plugin

    cp = sub.add_parser("compare", help="the same workload through several scenarios, side by side")
    cp.add_argument("scenarios", nargs="+", help="scenario YAML paths or bundled keys")
    cp.add_argument("--out", metavar="DIR", help="write compare.csv, compare.parquet and compare.html here")
    cp.add_argument("--set", action="append", metavar="FIELD=VALUE", help="override a field in every scenario")
    add_allow_plugin(cp)
    cp.set_defaults(fn=run)


def run(args: argparse.Namespace) -> int:
    from ..explore.cli import compare_command
    from .run_cmd import trust_from

    return compare_command(args.scenarios, args.out, args.set or [], trust=trust_from(args))
