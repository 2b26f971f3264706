"""``pdsim run SCENARIO``: simulate one scenario, print its summary, write its tables and report."""
from __future__ import annotations

import argparse
import sys


def register(sub) -> None:
    r = sub.add_parser("run", help="simulate one scenario",
                       description="Simulate one scenario and print its bench_serving-style summary.")
    r.add_argument("scenario", help="scenario YAML path or bundled key (see `pdsim list scenarios`)")
    r.add_argument("--out", metavar="DIR", help="write summary.json, requests/timeline tables and report.html here")
    r.add_argument("--set", action="append", metavar="FIELD=VALUE",
                   help="override a scenario field, e.g. --set cluster.decode.count=2 --set seed=7")
    r.add_argument("--format", choices=["parquet", "csv"], default="parquet",
                   help="file format of the request and timeline tables (default: parquet)")
    r.add_argument("--no-report", action="store_true", help="skip report.html")
    r.add_argument("--standalone-report", action="store_true",
                   help="inline plotly.js in report.html (~5 MB, works alone offline); by default the report "
                        "loads plotly.min.js written once next to it")
    r.add_argument("--no-progress", action="store_true", help="no progress bar (it is shown on a terminal only)")
    r.add_argument("--no-verdict-check", action="store_true",
                   help="state the verdicts without re-simulating their suggested fixes")
    r.add_argument("--verdict-budget-s", type=nonnegative_float, metavar="S",
                   help="wall seconds the re-simulated checks of the verdicts' suggestions may take in all "
                        "(default: as long as the run's own simulation took)")
    r.add_argument("--workers", type=positive_int, metavar="N", default=1,
                   help="worker processes for a scenario of several replicas (replicas.count; default 1); "
                        "the result does not depend on it")
    add_allow_plugin(r)
    r.set_defaults(fn=run)


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text[:40]!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def nonnegative_float(text: str) -> float:
    """argparse type: a number >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds >= 0, got {text[:40]!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds >= 0, got {text[:40]!r}")
    return value


def check_out_dir(path: str) -> None:
    """Refuse an --out folder that cannot be created or written, before any simulation runs."""
    import tempfile
    from pathlib import Path

    from ..specs.errors import SpecError

    try:
        Path(path).mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".pdsim-write-test-"):
            pass
    except OSError as err:
        raise SpecError(f"cannot write here: {err.strerror or err}", source=path, field="--out") from None


def hardware_text(sc) -> str:
    """``2 GPUs of a800 (part of one node)``, ``48 GPUs: 32 h800 (4 nodes) + 16 h20 (2 nodes)``."""
    per: dict[str, list[int]] = {}
    for role, gi, g in sc.scenario.cluster.groups():
        hw = sc.hardware_of(role, gi)
        n = g.count * g.gpus_per_instance(hw.gpus_per_node)
        per.setdefault(hw.name, [0, hw.gpus_per_node])[0] += n
    total = sum(n for n, _ in per.values())

    def nodes(n: int, gpn: int) -> str:
        if n < gpn:
            return "part of one node"
        k = n / gpn
        return f"{k:g} node{'s' if k != 1 else ''}"

    if len(per) == 1:
        name, (n, gpn) = next(iter(per.items()))
        return f"{total} GPUs of {name} ({nodes(n, gpn)})"
    return f"{total} GPUs: " + " + ".join(f"{n} {name} ({nodes(n, gpn)})" for name, (n, gpn) in per.items())


def add_allow_plugin(parser) -> None:
    parser.add_argument("--allow-plugin", action="append", metavar="MODULE", default=[],
                        help="allow the scenario's `MODULE:Class` plug-ins from this module or package "
                             "(repeatable); the module is imported and its code runs")


def trust_from(args: argparse.Namespace):
    from ..specs.trust import Trust

    return Trust(allow_plugins=tuple(getattr(args, "allow_plugin", None) or ()))


def progress_bar(enabled: bool):
    """(callback, bar) for ``pdsim.simulate(progress=...)``; (None, None) when disabled."""
    if not enabled:
        return None, None
    from tqdm import tqdm

    bar = tqdm(total=0, unit="req", file=sys.stderr, dynamic_ncols=True, leave=False)

    def cb(sim_now: float, wall: float, done: int, n: int) -> None:
        bar.total = n
        bar.n = done
        speed = sim_now / wall if wall > 0 else 0.0
        bar.set_postfix_str(f"sim {sim_now:,.0f}s | {speed:,.0f}x real time", refresh=False)
        bar.refresh()

    return cb, bar


def run(args: argparse.Namespace) -> int:
    from .. import api
    from ..report.figures import report_html, summary_rows

    sc = api.load_scenario(args.scenario, args.set or [], trust=trust_from(args))
    if args.out:
        check_out_dir(args.out)
    from ..specs.machine import warn_if_elsewhere

    warn_if_elsewhere(sc)  # a measured profile used on another machine: one line, how to re-measure
    cb, bar = progress_bar(not args.no_progress and sys.stderr.isatty())
    try:
        res = api.simulate(sc, progress=cb, workers=args.workers)
    finally:
        if bar is not None:
            bar.close()
    s = res.summary()
    print(f"pdsim run: {sc.name}  ({hardware_text(sc)}, {sc.model.name})")
    width = max(len(a) for a, _ in summary_rows(s))
    for label, value in summary_rows(s):
        print(f"  {label:<{width}}  {value:>12}")
    if s["drop_reasons"]:
        print("  drop reasons: " + ", ".join(f"{k}={v}" for k, v in s["drop_reasons"].items()))
    print(f"  simulated {s['sim_time_s']:,.1f} s in {s['wall_s']:.2f} s wall "
          f"({len(res.requests) / max(s['wall_s'], 1e-9):,.0f} requests/s, {s['sim_events']:,} engine steps)")
    from ..explore.what_if import diagnose
    from ..metrics.verdicts import slo_failure_lines, verdict_lines

    for line in slo_failure_lines(s):
        print("  " + line)
    # suggestions re-simulated within a budget: by default the run's own time (explore/what_if.py)
    def announce(i: int, n: int, s, left: float) -> None:
        print(f"  checking suggestion {i}/{n} by re-simulation ({left:,.1f} s of budget left): {s.action}",
              file=sys.stderr, flush=True)

    verdicts = diagnose(res, check=not args.no_verdict_check, budget_s=args.verdict_budget_s, on_check=announce)
    for line in verdict_lines(verdicts):
        print("  " + line)
    if args.out:
        from ..report.outputs import write_run_outputs

        written = write_run_outputs(res, args.out, args.format, report=not args.no_report,
                                    standalone=args.standalone_report, verdicts=verdicts)
        print(f"  wrote {args.out}/: " + ", ".join(written))
    return 0
