"""Sweep benchmark (a script, not a timed test): the DeepSeek-V3 13-node H800 sweep
(workloads/sweeps/dsv3-h800-13nodes.yaml: 120 configurations, 100 within 104 GPUs, 5,000
requests each) on this machine's cores. Reports the total wall time, the cost per
configuration, the planning (validation) time and the time of a resumed rerun (all cached).
Target: under 5 minutes on a 2-core machine.

    python benchmarks/bench_sweep.py [--workers N] [--out DIR] [--ray] [--profile]

``--profile`` also profiles one configuration's simulation (cProfile, top functions by
cumulative time), to see where a configuration's time goes.
"""
from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from pdsim.explore import plan_sweep, run_sweep
from pdsim.explore.runner import default_workers
from pdsim.specs.catalog import workloads_dir

SWEEP = workloads_dir() / "sweeps" / "dsv3-h800-13nodes.yaml"


def profile_one() -> None:
    import cProfile
    import pstats

    from pdsim.explore.search import simulate_metrics

    plan = plan_sweep(SWEEP)
    cfg = next(c for c in plan.configs if c.status == "pending")
    simulate_metrics(cfg.data, str(plan.base_dir))  # warm-up (imports)
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    simulate_metrics(cfg.data, str(plan.base_dir))
    prof.disable()
    print(f"\nprofile of one configuration ({cfg.layout['layout']}, {time.perf_counter() - t0:.2f} s):")
    pstats.Stats(prof).sort_stats("cumulative").print_stats(18)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--out")
    ap.add_argument("--ray", action="store_true")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--no-resume", action="store_true", help="skip the resumed (all cached) rerun")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="pdsim-bench-sweep-")
    shutil.rmtree(out, ignore_errors=True)
    workers = args.workers or default_workers()

    t0 = time.perf_counter()
    plan = plan_sweep(SWEEP)
    t_plan = time.perf_counter() - t0

    t0 = time.perf_counter()
    df = run_sweep(SWEEP, out, workers=workers, ray=args.ray, progress=False)
    wall = time.perf_counter() - t0
    ok = df[df["status"] == "ok"]
    n_req = int(ok["completed"].sum() + ok["dropped"].sum())

    t_resume, cached = float("nan"), 0
    if not args.no_resume:
        t0 = time.perf_counter()
        again = run_sweep(SWEEP, out, workers=workers, progress=False)
        t_resume, cached = time.perf_counter() - t0, again.attrs["cached"]

    print(f"sweep          {SWEEP.name}: {len(df)} configurations, {len(ok)} simulated, "
          f"{df.attrs['infeasible']} infeasible, {df.attrs['errors']} errors")
    print(f"machine        {default_workers()} cores; {workers} workers{' (ray)' if args.ray else ''}")
    print(f"total wall     {wall:.1f} s  (target < 300 s)")
    print(f"per config     {wall / max(len(ok), 1):.2f} s wall per simulated configuration; "
          f"{ok['eval_wall_s'].mean():.2f} s mean on one core (min {ok['eval_wall_s'].min():.2f}, "
          f"max {ok['eval_wall_s'].max():.2f})")
    print(f"parallelism    {ok['eval_wall_s'].sum() / wall:.2f}x (sum of per-config time / wall)")
    print(f"requests       {n_req:,} simulated, {n_req / wall:,.0f} per wall-second")
    print(f"planning       {t_plan:.2f} s to validate axes and pre-check {len(plan.configs)} configurations")
    print(f"resume         {t_resume:.2f} s to rerun with every configuration cached "
          f"({cached} cached)")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "sweep": SWEEP.name, "configurations": len(df), "simulated": len(ok), "workers": workers,
            "cores": default_workers(), "wall_s": wall, "cpu_s": float(ok["eval_wall_s"].sum()),
            "requests": n_req, "requests_per_s": n_req / wall, "plan_s": t_plan, "resume_s": t_resume}, indent=2))
    print(f"outputs        {out}")
    if args.profile:
        profile_one()


if __name__ == "__main__":
    main()
