"""``pdsim experiment EXP.yaml --out DIR``: compare policies over workloads, deployments and
seeds, with confidence intervals and paired tests against a baseline."""
from __future__ import annotations

import argparse


def register(sub) -> None:
    from .run_cmd import add_allow_plugin
    from .run_cmd import positive_int

    ex = sub.add_parser("experiment", help="compare scheduling policies with confidence intervals",
                        description="Run every policy x workload x deployment x seed of an experiment YAML (common "
                                    "random numbers: every policy of a replicate sees the same requests), cache each "
                                    "run (a rerun resumes), and write means with confidence intervals, paired tests "
                                    "against the baseline, tables and a report.")
    ex.add_argument("experiment", help="experiment YAML path, or a bundled experiment's name (mooncake-routing, "
                                       "mooncake-routing-quick)")
    ex.add_argument("--out", required=True, metavar="DIR", help="output folder (tables, report, cache)")
    ex.add_argument("--workers", type=positive_int, metavar="N",
                    help="simulate N runs in parallel (default: CPU count)")
    ex.add_argument("--ray", action="store_true", help="run on a local Ray instance")
    ex.add_argument("--ray-address", metavar="ADDR", help="run on the Ray cluster at ADDR")
    ex.add_argument("--no-resume", action="store_true", help="ignore cached runs")
    ex.add_argument("--standalone-report", action="store_true", help="inline plotly.js in report.html")
    ex.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_allow_plugin(ex)
    ex.set_defaults(fn=run)


def run(args: argparse.Namespace) -> int:
    import sys

    from ..experiment import run_experiment
    from .run_cmd import trust_from

    res = run_experiment(args.experiment, args.out, workers=args.workers, ray=args.ray, ray_address=args.ray_address,
                         resume=not args.no_resume, progress=not args.no_progress and sys.stderr.isatty(),
                         trust=trust_from(args), standalone_report=args.standalone_report)
    spec = res.plan.spec
    runs = res.runs
    ok = int((runs["status"] == "ok").sum())
    print(f"pdsim experiment: {spec.name}  ({len(runs)} runs: {ok} ok, {res.computed} simulated now, "
          f"{res.cached} from the cache)")
    bad = runs[runs["status"] != "ok"]
    for _, r in bad.head(5).iterrows():
        print(f"  {r['status']}: {r['deployment']}/{r['workload']}/{r['policy']} seed {r['seed']}: {r['reason']}")
    sig = res.paired[res.paired["significant"]]
    for _, r in sig.iterrows():
        rel = f"{r['rel_diff']:+.1%}, " if r["rel_diff"] == r["rel_diff"] else ""  # NaN: a baseline mean of 0
        print(f"  {r['deployment']}/{r['workload']}: {r['policy']} vs {r['baseline']}: {r['metric']} "
              f"{r['mean_diff']:+.4g} ({rel}p={r['p_value']:.2g})")
    if sig.empty and len(res.paired):
        print(f"  no difference against {spec.baseline_name} is significant at {1 - spec.confidence:g}")
    print(f"  wrote {args.out}/: runs, summary, paired (parquet + csv), quantiles, report.html")
    return 0
