"""``pdsim calibrate fit|report``: refit cost-model constants; measured vs predicted."""
from __future__ import annotations

import argparse


def register(sub) -> None:
    ca = sub.add_parser("calibrate", help="refit cost-model constants / report measured vs predicted")
    ca.add_argument("action", choices=["fit", "report"], help="fit: refit and write profiles; report: errors per row")
    ca.add_argument("--system", action="append", metavar="KEY", help="hardware profile key (repeatable); default all")
    ca.add_argument("--dry-run", action="store_true", help="fit without writing hardware_profiles/")
    ca.add_argument("--html", metavar="FILE", help="report: write the measured-vs-predicted figure here")
    ca.add_argument("--section", action="append", choices=["kernels", "steps", "constants"],
                    help="report: only these sections (repeatable; default all: kernel rows, whole steps, constants)")
    ca.set_defaults(fn=run)


def run(args: argparse.Namespace) -> int:
    if args.action == "fit":
        from ..calibrate.fit import fit_all

        fit_all(args.system or None, write=not args.dry_run)
        return 0
    from ..calibrate.report import report

    print(report(args.html, tuple(args.section or ("kernels", "steps", "constants"))))
    return 0
