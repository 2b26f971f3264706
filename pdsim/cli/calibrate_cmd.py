"""``pdsim calibrate fit|report|from-runs|from-steps``: refit cost-model constants; measured vs
predicted; deployment constants from a user's own real runs or from an engine's step trace."""
from __future__ import annotations

import argparse
import sys


def register(sub) -> None:
    ca = sub.add_parser("calibrate", help="refit cost-model constants / report measured vs predicted / fit from "
                                          "real runs",
                        description="fit: refit kernel constants from calibration/data and write profiles; report: "
                                    "errors per row; from-runs RUN... --scenario S: refit the deployment-level "
                                    "constants (host/step overheads, request path, transfer fixed cost) to real "
                                    "runs, cross-validated, and write a profile overlay; from-steps TRACE... "
                                    "--scenario S: fit the engine's host work per step, sequence and context "
                                    "token to its own step trace")
    ca.add_argument("action", choices=["fit", "report", "from-runs", "from-steps"],
                    help="fit: refit and write profiles; report: errors per row; from-runs: fit to real runs; "
                         "from-steps: fit to an engine's step trace")
    ca.add_argument("runs", nargs="*", metavar="RUN",
                    help="from-runs: real runs (anything `pdsim validate` reads: pdsim replay output, bench_serving/"
                         "vLLM result JSON, AIPerf, genai-bench, server request logs); from-steps: step traces "
                         "(JSON columns/rows, or vLLM's own step rows recorded by calibration/microbench/"
                         "vllm_step_trace.py, PATH@LOAD for one load of a recording; pdsim/calibrate/from_steps.py)")
    ca.add_argument("--system", action="append", metavar="KEY", help="hardware profile key (repeatable); default all")
    ca.add_argument("--dry-run", action="store_true", help="fit without writing hardware_profiles/")
    ca.add_argument("--html", metavar="FILE", help="report: write the measured-vs-predicted figure here")
    ca.add_argument("--section", action="append", choices=["kernels", "steps", "forward", "mixed", "overlap", "constants"],
                    help="report: only these sections (repeatable; default all: kernel rows, whole steps, whole "
                         "forwards measured on a GPU (forward.csv), mixed prefill+decode steps of the real CPU "
                         "engine, constants)")
    ca.add_argument("--scenario", help="from-runs: scenario YAML path or key describing the runs' deployment")
    ca.add_argument("--set", action="append", metavar="FIELD=VALUE", help="from-runs: override a scenario field")
    ca.add_argument("--holdout", action="append", metavar="RUN",
                    help="from-runs: a run the fit never sees, only predicts (repeatable; default: leave one run out)")
    ca.add_argument("--param", action="append", metavar="NAME",
                    help="from-runs: a constant to fit (repeatable; default step_overhead_us, seq_overhead_us, "
                         "ctx_overhead_ns, router_ms, and setup_ms for P/D); from-steps: the three host constants "
                         "(default) and 'attention', the prefill attention kernel's rate")
    ca.add_argument("--group", metavar="ROLE[.INDEX]",
                    help="from-steps: the scenario's group whose engine the traces were recorded on (colocated, "
                         "prefill or decode; default the colocated group); the overlay is then that group's "
                         "--set cluster.ROLE.INDEX.hardware")
    ca.add_argument("--max-evals", type=int, default=40,
                    help="from-runs: least-squares evaluations per fit at most (default 40; each also simulates "
                         "once per constant for the Jacobian, and every evaluation simulates every fitted run)")
    ca.add_argument("--arrivals", choices=["auto", "send_times", "closed_loop"], default="auto",
                    help="from-runs: how each run's requests arrive (as pdsim validate)")
    ca.add_argument("--out", metavar="YAML", help="from-runs: write the profile overlay here")
    ca.set_defaults(fn=run)


def run(args: argparse.Namespace) -> int:
    from ..specs.errors import SpecError

    if args.action not in ("from-runs", "from-steps") and args.runs:
        raise SpecError(f"{args.action} takes no real runs (from-runs does)", field="RUN")
    if args.action == "fit":
        from ..calibrate.fit import fit_all

        fit_all(args.system or None, write=not args.dry_run)
        return 0
    if args.action == "report":
        from ..calibrate.report import report

        print(report(args.html, tuple(args.section)) if args.section else report(args.html))  # default: every section
        return 0
    if args.action == "from-steps":
        return _from_steps(args)
    return _from_runs(args)


def _from_steps(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .. import api
    from ..calibrate.from_steps import from_steps, overlay_text, set_field, table_text
    from ..specs.errors import SpecError
    from ..specs.machine import warn_if_elsewhere

    if not args.runs or not args.scenario:
        raise SpecError("give step traces and --scenario (pdsim calibrate from-steps TRACE... --scenario S)",
                        field="TRACE")
    sc = api.load_scenario(args.scenario, args.set or [])
    warn_if_elsewhere(sc)
    data, _ = api.load_scenario_data(args.scenario, args.set or [])
    res = from_steps(sc, list(args.runs), args.holdout, args.param, args.group)
    role, index = res.group
    print(f"pdsim calibrate from-steps: {len(args.runs)} trace(s), scenario {sc.name}, group {role}.{index}")
    print(table_text(res))
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        own = (role, index) in sc.group_hardware  # the group runs on its own profile: the overlay's base
        base = data["cluster"][role][index]["hardware"] if own else data["hardware"]
        out.write_text(overlay_text(res, sc, str(base), out))
        print(f"wrote {out}: use it with --set {set_field(res, sc)}={out}")
    return 0


def _from_runs(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .. import api
    from ..calibrate.from_runs import from_runs, overlay_text, table_text
    from ..specs.machine import warn_if_elsewhere
    from ..specs.errors import SpecError

    if not args.runs or not args.scenario:
        raise SpecError("give real runs and --scenario (pdsim calibrate from-runs RUN... --scenario S)", field="RUN")
    if args.max_evals < 1:
        raise SpecError(f"expected >= 1, got {args.max_evals}", field="--max-evals")
    sc = api.load_scenario(args.scenario, args.set or [])
    warn_if_elsewhere(sc)
    data, _ = api.load_scenario_data(args.scenario, args.set or [])
    print(f"pdsim calibrate from-runs: {len(args.runs)} run(s), scenario {sc.name}", file=sys.stderr)
    res = from_runs(sc, list(args.runs), args.holdout, args.param, args.max_evals, args.arrivals)
    sims = sum(f.evaluations for f in res.fits)
    print(f"fit ({res.method}; {len(res.fits)} fit(s), {sims} simulations of the fitted runs each)")
    print(table_text(res))
    if args.out:
        out = Path(args.out)
        fitted = [r for r in args.runs if r not in (args.holdout or [])]
        text, sets = overlay_text(res, sc, str(data["hardware"]), fitted, out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
        print(f"wrote {out}: use it with --set hardware={out}" + "".join(f" --set {s}" for s in sets))
    return 0
