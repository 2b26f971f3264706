"""``pdsim workload stats FILE_OR_SPEC``: arrival rate, ISL/OSL distributions, prefix reuse."""
from __future__ import annotations

import argparse


def register(sub) -> None:
    wl = sub.add_parser("workload", help="workload tools")
    wsub = wl.add_subparsers(dest="action", required=True, metavar="ACTION")
    st = wsub.add_parser("stats", help="arrival rate, ISL/OSL distributions, prefix reuse of a trace or spec")
    st.add_argument("target", help="a trace file, a workload or scenario YAML, or a bundled trace/spec name")
    st.add_argument("--html", metavar="FILE", help="write the statistics figure here")
    st.add_argument("--skip-bad-rows", action="store_true", help="skip and count malformed trace rows instead of failing")
    st.add_argument("--format", default="auto", choices=trace_formats(),
                    help="trace format (default: detected from the content)")
    st.add_argument("--seed", type=seed_arg, metavar="N", help="seed for a generated workload spec (an integer >= 0)")
    st.set_defaults(fn=run)


def trace_formats() -> list[str]:
    """The formats a scenario's ``workload.trace.format`` accepts (specs/workload.py TraceSpec)."""
    from typing import get_args, get_type_hints

    from ..specs.workload import TraceSpec

    return list(get_args(get_type_hints(TraceSpec)["format"]))


def seed_arg(text: str) -> int:
    """argparse type of a seed: an integer in [0, 2**63)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text[:40]!r}") from None
    if not 0 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text[:40]!r}")
    return value


def run(args: argparse.Namespace) -> int:
    from .workload_stats import stats_command

    return stats_command(args.target, args.html, args.skip_bad_rows, args.format, args.seed)
