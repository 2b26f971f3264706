"""Core simulator benchmark (a script, not a timed test).

Replays the bundled Mooncake conversation trace (12,031 requests, 59 min) through the
DeepSeek-V3 P4D6 H800 example on one CPU core and reports simulated requests per wall-second,
engine steps per second, the share of time in prices, and peak memory.

    python benchmarks/bench_core.py [--scenario KEY_OR_PATH] [--set FIELD=VALUE ...] [--profile]
"""
from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import resource
import time
from pathlib import Path

import pdsim
from pdsim.sim.world import World
from pdsim.workload import materialize


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenario", default="dsv3-h800-p4d6")
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--profile", action="store_true", help="cProfile one run: share of time in pdsim.costs")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core, as the target states
    t0 = time.perf_counter()
    sc = pdsim.load_scenario(args.scenario, args.set)
    table = materialize(sc.scenario.workload, sc.scenario.seed, sc.base_dir)
    t_load = time.perf_counter() - t0
    best = None
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        rec = World(sc, table).run()
        wall = time.perf_counter() - t0
        best = wall if best is None else min(best, wall)
    t0 = time.perf_counter()
    res = pdsim.metrics.Results(rec, sc)
    s = res.summary()
    t_metrics = time.perf_counter() - t0
    n = len(table)
    print(f"scenario            {sc.name} ({n} requests, {s['gpus']} GPUs)")
    print(f"load + workload     {t_load:.2f} s")
    print(f"simulate (best/{args.repeat})   {best:.2f} s wall for {rec.end_s:,.0f} s simulated")
    print(f"requests / wall-s   {n / best:,.0f}")
    print(f"engine steps        {rec.events:,}  ({rec.events / best:,.0f} steps/s)")
    print(f"metrics + summary   {t_metrics:.2f} s")
    print(f"peak RSS            {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MiB")
    print(f"completed           {s['completed']}  mean TTFT {s['mean_ttft_ms']:.0f} ms  mean ITL {s['mean_itl_ms']:.1f} ms")
    if args.json:
        from bench_scale import simpy_events_per_s

        Path(args.json).write_text(json.dumps({
            "scenario": sc.name, "requests": n, "gpus": s["gpus"], "repeat": args.repeat, "best_wall_s": best,
            "requests_per_s": n / best, "engine_steps": rec.events, "steps_per_s": rec.events / best,
            "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "simpy_events_per_s": simpy_events_per_s()}, indent=2))
    if args.profile:
        pr = cProfile.Profile()
        pr.enable()
        World(sc, table).run()
        pr.disable()
        st = pstats.Stats(pr)
        total = st.total_tt
        costs = sum(v[2] for k, v in st.stats.items() if "/pdsim/costs/" in k[0])
        print(f"time in prices      {costs / total:.1%} of the profiled run (tottime in pdsim/costs)")
        # calls a request costs (cProfile counts C builtins too): the figure the speed work cuts
        py_calls = sum(v[1] for k, v in st.stats.items() if k[0] != "~")
        c_calls = sum(v[1] for k, v in st.stats.items() if k[0] == "~")
        print(f"calls / request     {(py_calls + c_calls) / n:.1f} ({py_calls / n:.1f} Python, {c_calls / n:.1f} builtin)")
        st.sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
