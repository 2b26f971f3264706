"""``pdsim sweep SWEEP.yaml --out DIR``: what-if sweeps (grid, random, max sustainable rate)."""
from __future__ import annotations

import argparse


def register(sub) -> None:
    from .run_cmd import add_allow_plugin, positive_int

    sw = sub.add_parser("sweep", help="simulate a grid/random/max-rate sweep of configurations",
                        description="Simulate every configuration of a sweep YAML (base scenario + axes), "
                                    "cache each one (a rerun resumes), and write results, Pareto frontiers and a report.")
    sw.add_argument("sweep", help="sweep YAML path (see workloads/sweeps/)")
    sw.add_argument("--out", required=True, metavar="DIR", help="output folder (results, cache, report)")
    sw.add_argument("--workers", type=positive_int, metavar="N",
                    help="simulate N configurations in parallel (default: CPU count)")
    sw.add_argument("--ray", action="store_true", help="run on a local Ray instance")
    sw.add_argument("--ray-address", metavar="ADDR", help="run on the Ray cluster at ADDR")
    sw.add_argument("--no-resume", action="store_true", help="ignore cached configurations")
    sw.add_argument("--heatmap", nargs=2, metavar=("X", "Y"),
                    help="the report's heatmap axes: axis fields, linked-axis names or prefill_layout/decode_layout "
                         "(default: the sweep file's report.heatmap, else two axes that do not move together)")
    add_allow_plugin(sw)
    sw.set_defaults(fn=run)


def run(args: argparse.Namespace) -> int:
    from ..explore.cli import sweep_command
    from .run_cmd import trust_from

    return sweep_command(args.sweep, args.out, workers=args.workers, ray=args.ray, ray_address=args.ray_address,
                         no_resume=args.no_resume, trust=trust_from(args),
                         heatmap=tuple(args.heatmap) if args.heatmap else None)
