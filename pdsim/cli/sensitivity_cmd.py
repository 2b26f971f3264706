"""``pdsim sensitivity SCENARIO``: which profile constants move the headline metrics most."""
from __future__ import annotations

import argparse
import json
import sys


def register(sub) -> None:
    s = sub.add_parser("sensitivity", help="perturb each fitted/assumed constant by its uncertainty and re-simulate",
                       description="Perturb every constant of the scenario's hardware profile that has a stated "
                                   "uncertainty (assumptions, derived and fitted models), and every assumption that "
                                   "lives in the price modules (P/D fixed costs, restart, MTP acceptance, expert skew "
                                   "and drift, CUDA-graph and DeepEP memory, NVLink and Mooncake transfer priors, "
                                   "dequantisation, small-kernel counts, two-batch overlap, attention backends) where "
                                   "the scenario uses it, to its low and high end, re-simulate, and rank the constants "
                                   "by how much they move mean TTFT, mean ITL, output throughput and goodput.")
    s.add_argument("scenario", help="scenario YAML path or bundled key (see `pdsim list scenarios`)")
    s.add_argument("--set", action="append", metavar="FIELD=VALUE",
                   help="override a scenario field first (e.g. --set workload.num_requests=300 for a quicker study)")
    s.add_argument("--only", action="append", metavar="CONSTANT",
                   help="perturb only these constants (e.g. efficiency.step_overhead_us, calibration.mooncake)")
    s.add_argument("--top", type=int, default=0, help="print only the first N rows (default all)")
    s.add_argument("--json", metavar="FILE", help="also write the table as JSON")
    s.set_defaults(fn=run)


def run(args: argparse.Namespace) -> int:
    from .. import api
    from ..calibrate.sensitivity import sensitivity, sensitivity_table

    sc = api.load_scenario(args.scenario, args.set or [])
    tty = sys.stderr.isatty()
    base, rows = sensitivity(sc, args.only, progress=(lambda c: print(f"  perturbing {c}", file=sys.stderr)) if tty else None)
    if args.top:
        rows = rows[: args.top]
    print(f"pdsim sensitivity: {sc.name} ({sc.hardware.name}, {sc.model.name}), {len(rows)} constants that move its prices")
    print(sensitivity_table(base, rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"scenario": sc.name, "baseline": base, "rows": rows}, f, indent=2, default=float)
        print(f"wrote {args.json}")
    return 0
