"""Command line: ``pdsim run | list | sweep | compare | calibrate | workload | dashboard``.

Thin: every command calls the public API or a subpackage's command function. Bad input ends
with one ``error:`` line naming the file and field, and exit status 2; ``--debug`` shows
tracebacks of unexpected failures.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .specs.errors import SpecError


def _progress_bar(total: int, enabled: bool):
    if not enabled:
        return None, None
    from tqdm import tqdm

    bar = tqdm(total=total, unit="req", file=sys.stderr, dynamic_ncols=True, leave=False)

    def cb(sim_now: float, wall: float, done: int, n: int) -> None:
        bar.total = n
        bar.n = done
        speed = sim_now / wall if wall > 0 else 0.0
        bar.set_postfix_str(f"sim {sim_now:,.0f}s | {speed:,.0f}x real time", refresh=False)
        bar.refresh()

    return cb, bar


def cmd_run(args: argparse.Namespace) -> int:
    from . import api
    from .report.figures import report_html, summary_rows

    sc = api.load_scenario(args.scenario, args.set or [])
    cb, bar = _progress_bar(0, not args.no_progress and sys.stderr.isatty())
    try:
        res = api.simulate(sc, progress=cb)
    finally:
        if bar is not None:
            bar.close()
    s = res.summary()
    print(f"pdsim run: {sc.name}  ({s['gpus']} GPUs, {s['nodes']:g} nodes of {sc.hardware.name}, {sc.model.name})")
    width = max(len(a) for a, _ in summary_rows(s))
    for label, value in summary_rows(s):
        print(f"  {label:<{width}}  {value:>12}")
    if s["drop_reasons"]:
        print("  drop reasons: " + ", ".join(f"{k}={v}" for k, v in s["drop_reasons"].items()))
    print(f"  simulated {s['sim_time_s']:,.1f} s in {s['wall_s']:.2f} s wall "
          f"({len(res.log.requests) / max(s['wall_s'], 1e-9):,.0f} requests/s, {s['sim_events']:,} engine steps)")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        with open(out / "summary.json", "w") as f:
            json.dump(s, f, indent=2, default=float)
        req, tl = res.requests, res.timeline
        if args.format == "parquet":
            req.to_parquet(out / "requests.parquet", index=False)
            tl.to_parquet(out / "timeline.parquet", index=False)
        else:
            req.to_csv(out / "requests.csv", index=False)
            tl.to_csv(out / "timeline.csv", index=False)
        if not args.no_report:
            report_html(res, str(out / "report.html"))
        print(f"  wrote {out}/: summary.json, requests.{args.format}, timeline.{args.format}"
              + ("" if args.no_report else ", report.html"))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from .sim.router import ROUTERS
    from .specs import catalog

    what = args.what
    if what in ("all", "hardware"):
        print("hardware profiles:")
        for k in catalog.hardware_keys():
            hw = catalog.load_hardware_ref(k)
            g = hw.gpu
            print(f"  {k:<8} {g.name:<16} {g.bf16_tflops:>5.0f} BF16 TFLOPS {g.hbm_gib:>4.0f} GiB {g.hbm_gbps:>5.0f} GB/s HBM "
                  f"| {hw.node.gpus_per_node} GPUs/node, {hw.node.nics_per_node}x{hw.node.nic_gbit:.0f} Gb/s NICs"
                  + ("  [calibrated]" if hw.calibration else ""))
    if what in ("all", "models"):
        print("models:")
        for k in catalog.model_keys():
            m = catalog.load_model_ref(k)
            print(f"  {k:<18} {m.total_params / 1e9:7.1f}B params ({m.active_params / 1e9:.1f}B active), "
                  f"{m.attention.upper()}, KV {m.kv_bytes_per_token():,} B/token ({m.kv_dtype})")
    if what in ("all", "scenarios"):
        print("example scenarios:")
        from .specs._convert import read_yaml

        for k in catalog.scenario_keys():
            data = read_yaml(catalog.scenarios_dir() / f"{k}.yaml") or {}
            print(f"  {k:<28} {data.get('description', '')}")
    if what in ("all", "routers"):
        print("routers: " + ", ".join(ROUTERS.keys()) + " (or package.module:ClassName)")
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    import time

    from .explore import run_sweep

    t0 = time.perf_counter()
    df = run_sweep(args.sweep, args.out, workers=args.workers, ray=args.ray, ray_address=args.ray_address,
                   resume=not args.no_resume, progress=sys.stderr.isatty())
    wall = time.perf_counter() - t0
    ok = df[df["status"] == "ok"]
    print(f"pdsim sweep: {len(df)} configurations ({len(ok)} feasible, {len(df) - len(ok)} infeasible), "
          f"{df.attrs.get('computed', len(df))} simulated in {wall:.1f} s")
    summary = json.loads((Path(args.out) / "summary.json").read_text())
    for metric, best in summary["best"].items():
        knobs = ", ".join(f"{k}={v}" for k, v in best["knobs"].items())
        print(f"  best {metric:<26} {best['value']:>10.3f}  [{best['config_id']}] {knobs}")
    print(f"  wrote {args.out}/: results.csv, results.parquet, pareto.csv, summary.json, report.html, configs/")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from .explore import compare

    df = compare(args.scenarios, args.out, args.set or [])
    cols = ["scenario", "gpus", "request_throughput", "output_throughput_per_gpu", "goodput_share",
            "mean_ttft_ms", "p90_ttft_ms", "p90_itl_ms", "mean_tpot_ms"]
    print(df[cols].to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    if args.out:
        print(f"wrote {args.out}/compare.csv, compare.html")
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    if args.action == "fit":
        from .calibrate.fit import fit_all

        fit_all(args.system or None, write=not args.dry_run)
        return 0
    from .calibrate.report import report

    print(report(args.html))
    return 0


def cmd_workload(args: argparse.Namespace) -> int:
    from .report.workload_figures import workload_figure
    from .specs._convert import build, read_yaml
    from .specs.workload import WorkloadSpec
    from .workload import materialize, read_trace, workload_stats

    target = Path(args.target)
    if target.suffix.lower() in (".yaml", ".yml"):
        data = read_yaml(target)
        data = data.get("workload", data) if isinstance(data, dict) else data
        try:
            spec = build(WorkloadSpec, data)
        except SpecError as err:
            raise err.at(source=str(target)) from None
        table = materialize(spec, seed=args.seed, base_dir=target.parent)
    else:
        table = read_trace(target, args.format, skip_bad_rows=args.skip_bad_rows)
    st = workload_stats(table)
    print(f"workload: {st['source']}")
    print(f"  requests {st['requests']:,} over {st['duration_s']:,.1f} s: {st['mean_rate']:.3f} req/s "
          f"(inter-arrival CV {st['interarrival_cv']:.2f})")
    for key in ("input_len", "output_len"):
        d = st[key]
        print(f"  {key:<10} mean {d['mean']:9.1f}  p50 {d['p50']:8.0f}  p90 {d['p90']:8.0f}  p99 {d['p99']:8.0f}  max {d['max']:8d}")
    print(f"  prefix reuse (infinite cache): {st['prefix_reuse_ratio']:.2%}")
    if st["skipped_rows"]:
        print(f"  skipped bad rows: {st['skipped_rows']}")
    if args.html:
        workload_figure(table, st).write_html(args.html, include_plotlyjs=True)
        print(f"  wrote {args.html}")
    return 0


def cmd_dashboard(args: argparse.Namespace) -> int:
    from .dashboards.app import serve

    serve(host=args.host, port=args.port, debug=args.debug)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pdsim", description="Simulate prefill/decode-disaggregated LLM serving clusters.")
    p.add_argument("--debug", action="store_true", help="show tracebacks of unexpected errors")
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="simulate one scenario")
    r.add_argument("scenario", help="scenario YAML path or bundled key (see `pdsim list scenarios`)")
    r.add_argument("--out", help="write summary.json, requests/timeline tables and report.html here")
    r.add_argument("--set", action="append", metavar="FIELD=VALUE",
                   help="override a scenario field, e.g. --set cluster.decode.count=2 --set seed=7")
    r.add_argument("--format", choices=["parquet", "csv"], default="parquet")
    r.add_argument("--no-report", action="store_true", help="skip report.html")
    r.add_argument("--no-progress", action="store_true")
    r.set_defaults(fn=cmd_run)

    ls = sub.add_parser("list", help="bundled hardware profiles, models, example scenarios, routers")
    ls.add_argument("what", nargs="?", default="all", choices=["all", "hardware", "models", "scenarios", "routers"])
    ls.set_defaults(fn=cmd_list)

    sw = sub.add_parser("sweep", help="simulate a grid/random/max-rate sweep of configurations")
    sw.add_argument("sweep")
    sw.add_argument("--out", required=True)
    sw.add_argument("--workers", type=int)
    sw.add_argument("--ray", action="store_true", help="run on a local Ray instance")
    sw.add_argument("--ray-address", help="run on the Ray cluster at ADDR")
    sw.add_argument("--no-resume", action="store_true", help="ignore cached configurations")
    sw.set_defaults(fn=cmd_sweep)

    cp = sub.add_parser("compare", help="the same workload through several scenarios, side by side")
    cp.add_argument("scenarios", nargs="+")
    cp.add_argument("--out")
    cp.add_argument("--set", action="append", metavar="FIELD=VALUE")
    cp.set_defaults(fn=cmd_compare)

    ca = sub.add_parser("calibrate", help="refit cost-model constants / report measured vs predicted")
    ca.add_argument("action", choices=["fit", "report"])
    ca.add_argument("--system", action="append", help="hardware profile key (repeatable); default all")
    ca.add_argument("--dry-run", action="store_true", help="fit without writing hardware_profiles/")
    ca.add_argument("--html", help="report: write the measured-vs-predicted figure here")
    ca.set_defaults(fn=cmd_calibrate)

    wl = sub.add_parser("workload", help="workload tools")
    wsub = wl.add_subparsers(dest="action", required=True)
    st = wsub.add_parser("stats", help="arrival rate, ISL/OSL distributions, prefix reuse of a trace or spec")
    st.add_argument("target")
    st.add_argument("--html", help="write the statistics figure here")
    st.add_argument("--skip-bad-rows", action="store_true")
    st.add_argument("--format", default="auto", choices=["auto", "mooncake", "azure", "burstgpt", "jsonl", "bench"])
    st.add_argument("--seed", type=int, default=0, help="seed for a generated workload spec")
    st.set_defaults(fn=cmd_workload)

    db = sub.add_parser("dashboard", help="interactive Dash app")
    db.add_argument("--host", default="127.0.0.1", help="bind address (default: localhost only)")
    db.add_argument("--port", type=int, default=8050)
    db.set_defaults(fn=cmd_dashboard)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.fn(args) or 0)
    except SpecError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into head & co.
        return 0
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # noqa: BLE001 - the CLI's last line of defence
        if args.debug:
            raise
        print(f"error: internal failure: {type(err).__name__}: {err} (rerun with --debug for the traceback)",
              file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
