"""``pdsim validate REAL --scenario S`` / ``pdsim validate --all validation/``: simulated vs real.

Exit status: 0 when every gated metric is within tolerance, 3 when one is past it (so it can
gate CI), 2 on bad input.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

PAST_TOLERANCE = 3


def register(sub) -> None:
    v = sub.add_parser(
        "validate", help="compare a simulation with a real run, metric by metric",
        description="Simulate exactly the requests of a real run (same lengths, same send times or the same "
                    "closed loop), align them one to one and report, per metric, real, simulated, signed error "
                    "and a verdict against tolerances (exit status 3 when one is past it). --all regenerates "
                    "docs/validation.md from the cases in a folder.")
    v.add_argument("real", nargs="?", help="a real run: `pdsim replay --out` folder, bench_serving/vLLM/genai-bench/"
                                           "AIPerf result or server request log; or a case folder of validation/ "
                                           "(with case.yaml: its run, scenario and tolerances)")
    v.add_argument("--scenario", help="scenario YAML path or bundled key describing the real deployment")
    v.add_argument("--set", action="append", metavar="FIELD=VALUE",
                   help="override a scenario field (with --all: every case, e.g. hardware=PATH of a re-measured "
                        "profile; the page says so)")
    v.add_argument("--format", default="auto", help="format of REAL (default: detected from its content)")
    v.add_argument("--record", type=int, help="line of the run in a multi-run JSONL result (default: the last)")
    v.add_argument("--arrivals", choices=["auto", "send_times", "closed_loop"], default="auto",
                   help="replay the real send times, or the closed loop at its max concurrency (default: closed loop "
                        "when the run recorded a max concurrency)")
    v.add_argument("--max-concurrency", type=int, help="closed-loop concurrency when the file does not say")
    v.add_argument("--tolerance", action="append", metavar="METRIC=FRACTION",
                   help="gate a metric, e.g. --tolerance p99_ttft_ms=0.3 (default: mean and p90 of TTFT and ITL "
                        "at 0.2); repeat for several")
    v.add_argument("--out", metavar="DIR", help="write validation.html, comparison.csv and both runs' summaries here")
    v.add_argument("--all", metavar="CASES", help="validate every case folder under CASES and write --docs")
    v.add_argument("--docs", default="docs/validation.md", help="page written by --all (default docs/validation.md)")
    v.add_argument("--step-speed", type=float, default=0.0, metavar="PCT",
                   help="also simulate the run with every engine step PCT %% faster and slower than priced, and "
                        "show each metric's range and elasticity (how fragile the comparison is near a knee; the "
                        "validation page uses 5: the host's own drift); default 0: not")
    v.set_defaults(fn=run)


def _tolerances(items: list[str] | None) -> dict[str, float] | None:
    from ..specs.errors import SpecError

    if not items:
        return None
    out = {}
    for it in items:
        k, sep, v = it.partition("=")
        try:
            val = float(v)
        except ValueError:
            val = -1.0
        if not sep or not k.strip() or not val > 0:
            raise SpecError(f"expected METRIC=FRACTION with a fraction > 0, got {it!r}", field="--tolerance")
        out[k.strip()] = val
    return out


def _step_frac(pct: float) -> float:
    """``--step-speed`` as a fraction (0: off); a value past the probe's range is refused by name."""
    from ..specs.errors import SpecError
    from ..validate.step_speed import check_frac

    if pct == 0:
        return 0.0
    try:
        return check_frac(pct / 100.0)
    except ValueError as err:
        raise SpecError(str(err), field="--step-speed") from None


def run(args: argparse.Namespace) -> int:
    from ..specs.errors import SpecError

    args.step_frac = _step_frac(args.step_speed)

    if args.all:
        if args.real or args.scenario:
            raise SpecError("--all takes the cases folder only (each case names its real run and scenario)",
                            field="--all")
        if Path(args.docs).is_dir():  # found before every case is simulated, not after
            raise SpecError(f"expected the page's file path (e.g. {Path(args.docs) / 'validation.md'}), got a folder",
                            field="--docs")
        from ..validate.suite import profile_preamble, run_all

        results = run_all(args.all, args.docs, overrides=args.set, preamble=profile_preamble(args.set),
                          step_speed=args.step_frac)
        for r in results:
            bad = [row for row in r.rows if row.verdict == "FAIL"]
            print(f"  {r.name:<34} {'pass' if r.passed else 'FAIL'}  " +
                  ", ".join(f"{row.metric} {row.error:+.1%}" for row in bad))
        print(f"wrote {args.docs} ({len(results)} cases)")
        return 0 if all(r.passed for r in results) else PAST_TOLERANCE
    if args.real and not args.scenario and _is_case(args.real):
        return _case(args)
    if not args.real or not args.scenario:
        raise SpecError("give a real run and --scenario, a case folder (with case.yaml), or --all CASES", field="real")
    return _one(args)


def _is_case(path: str) -> bool:
    from pathlib import Path

    from ..validate.case import CASE_FILE

    return (Path(path) / CASE_FILE).is_file()


def _case(args: argparse.Namespace) -> int:
    """One case folder of validation/: its real run, scenario, sets and tolerances from its case.yaml."""
    import warnings
    from pathlib import Path

    from ..specs.errors import SpecError
    from ..validate.case import run_case
    from ..validate.report import fmt

    if args.tolerance or args.record is not None or args.max_concurrency is not None or args.format != "auto" \
            or args.arrivals != "auto":
        raise SpecError("a case folder states its format, arrivals and tolerances in case.yaml; give only --set "
                        "and --out with it", field="real")
    html = None
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        html = Path(args.out) / "validation.html"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        r = run_case(args.real, html, overrides=args.set, step_speed=args.step_frac)
    print(f"{r.name}: {r.requests} requests aligned ({r.arrivals}); profile {r.profile}")
    for n in r.notes:
        print(f"  note: {n}", file=sys.stderr)
    print_rows(r.rows, args.step_frac)
    if html is not None:
        print(f"  wrote {html}")
    bad = [row for row in r.rows if row.verdict == "FAIL"]
    if bad:
        print(f"past tolerance: {', '.join(row.metric for row in bad)}", file=sys.stderr)
        return PAST_TOLERANCE
    return 0


def print_rows(rows, step_speed: float = 0.0) -> None:
    """The metric table: real value with the real run's own 90 % sampling interval, simulated
    (and, with ``step_speed``, simulated with every step that much faster and slower; where the
    case has one, with the profile re-measured after its recording), error, verdict (a failure
    inside that interval marked 'in spread', one the step band reaches 'within ±x% step speed',
    one between the two profiles' simulations 'between the profiles before and after')."""
    from ..validate.report import after_cell, fmt, interval, marks, step_band

    after = any(r.after is not None for r in rows)  # the case's profile re-measured after its recording
    band = (f"{'every step ∓' + format(step_speed, '.0%'):<36}" if step_speed else "") + (
        f"{'profile after':<20}" if after else "")
    print(f"  {'metric':<24}{'real':>12}  {'real 90% interval':<26}{'simulated':>12}  {band}{'error':>10}  verdict")
    for r in rows:
        cell = (f"{step_band(r, step_speed):<36}" if step_speed else "") + (f"{after_cell(r):<20}" if after else "")
        print(f"  {r.metric:<24}{fmt(r.real):>12}  {interval(r):<26}{fmt(r.simulated):>12}  {cell}"
              f"{fmt(r.error, True):>10}  {r.verdict}" + (f" (±{r.tolerance:.0%})" if r.tolerance is not None else "")
              + marks(r, step_speed))


def _one(args: argparse.Namespace) -> int:
    import json
    import warnings
    from pathlib import Path

    from .. import api
    from ..ingest import read_run
    from ..specs.errors import SpecError
    from ..validate.align import simulate_aligned
    from ..validate.compare import compare
    from ..validate.report import fmt, validation_html

    ing = read_run(args.real, args.format, args.record)
    print(f"pdsim validate: {args.real}: detected {ing.format}, {len(ing.record)} requests", file=sys.stderr)
    for n in ing.notes:
        print(f"  note: {n}", file=sys.stderr)
    sc = api.load_scenario(args.scenario, args.set or [])
    from ..specs.machine import warn_if_elsewhere

    warn_if_elsewhere(sc)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a real run has no per-phase timestamps (all-NaN means)
        al = simulate_aligned(ing.record, sc, args.arrivals, args.max_concurrency)
        try:
            rows, extras = compare(al.real, al.sim, _tolerances(args.tolerance), al.pairs)
        except ValueError as err:
            raise SpecError(str(err), field="--tolerance") from None
        if args.step_frac:
            from ..validate.step_speed import with_step_band

            rows = with_step_band(rows, ing.record, sc, args.step_frac, args.arrivals, args.max_concurrency)
    print(f"{len(al.pairs)} requests aligned ({al.arrivals}); scenario {sc.name}")
    print(f"  {al.prefix_note}")
    if al.host_note:
        print(f"  note: {al.host_note}", file=sys.stderr)
    print_rows(rows, args.step_frac)
    print("  KS distance: " + ", ".join(f"{k} {v:.3f}" for k, v in extras["ks"].items() if v is not None))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        validation_html(al, rows, extras, str(out / "validation.html"), f"pdsim validation: {sc.name}",
                        [f"real run format: {ing.format}"] + ing.notes + [al.prefix_note]
                        + ([al.host_note] if al.host_note else []), step_speed=args.step_frac)
        import pandas as pd
        pd.DataFrame([r.__dict__ for r in rows]).to_csv(out / "comparison.csv", index=False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            json.dump({"real": al.real.summary(), "simulated": al.sim.summary(), "ks": extras["ks"],
                       "per_request": extras.get("per_request")}, open(out / "summaries.json", "w"),
                      indent=2, default=float)
        print(f"  wrote {out}/: validation.html, comparison.csv, summaries.json")
    bad = [r for r in rows if r.verdict == "FAIL"]
    if bad:
        print(f"past tolerance: {', '.join(r.metric for r in bad)}", file=sys.stderr)
        return PAST_TOLERANCE
    return 0
