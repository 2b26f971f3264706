"""Scale benchmark (a script, not a timed test): wall time and peak memory against trace length
and cluster size, for the whole pipeline a user runs (simulate, metrics, output files, report).

Traces: the bundled Mooncake conversation trace (12,031 requests, 59 min) tiled end to end
(tile k starts after tile k-1's last arrival plus a minute; its block ids are offset so tiles
share no prefix), cut to the requested number of requests. Clusters: the DeepSeek-V3 P4D6 H800
example (80 GPUs), or ``--fleet F``: F copies of its instance groups (80 F GPUs) serving F
interleaved copies of the trace (F times the rate), one router over all of them.

Each size runs in a fresh process so its peak RSS is its own; the figures printed per phase
are the process's peak so far (ru_maxrss). The same process's bare-SimPy event rate is printed
as a machine normaliser.

    python benchmarks/bench_scale.py                          # 12k, 120k, 1.2M requests on P4D6
    python benchmarks/bench_scale.py --sizes 10000000 --fleet 12   # 10M requests, 960 GPUs
    python benchmarks/bench_scale.py --sizes 144372 --fleet 12 --replicas --workers 2   # 12 replicas, 2 processes
    python benchmarks/bench_scale.py --json out.json          # machine-readable rows
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

SCENARIO = "dsv3-h800-p4d6"


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def simpy_events_per_s(n: int = 200_000) -> float:
    """Bare SimPy: ten processes yielding timeouts (the normaliser)."""
    import simpy

    env = simpy.Environment()

    def proc(env):
        while True:
            yield env.timeout(0.01)

    for _ in range(10):
        env.process(proc(env))
    t0 = time.perf_counter()
    for _ in range(n):
        env.step()
    return n / (time.perf_counter() - t0)


def tiled_table(base, n: int, fleet: int = 1, gap_s: float = 60.0):
    """``n`` requests: ``fleet`` interleaved copies of ``base`` per tile, tiles end to end."""
    import numpy as np

    from pdsim.workload.table import RequestTable

    per_tile = len(base) * fleet
    tiles = -(-n // per_tile)
    span = float(base.arrival_s[-1]) + gap_s
    step = max((int(np.max(np.concatenate(base.hash_ids))) + 1) if base.hash_ids is not None else 0, 1)
    arr, inp, out, hids = [], [], [], []
    copy = 0
    for k in range(tiles):
        for f in range(fleet):
            # copies of one tile are shifted by a fraction of the mean gap so they interleave
            arr.append(base.arrival_s + k * span + f * (span / len(base)) / fleet)
            inp.append(base.input_len)
            out.append(base.output_len)
            if base.hash_ids is not None:
                hids.extend(h + copy * step for h in base.hash_ids)
            copy += 1
    a = np.concatenate(arr)
    order = np.argsort(a, kind="stable")[:n]
    return RequestTable(a[order], np.concatenate(inp)[order], np.concatenate(out)[order],
                        hash_ids=[hids[i] for i in order] if hids else None, block_size=base.block_size,
                        source=f"{base.source} x{copy}")


def child(n: int, fleet: int, report: bool, replicas: bool = False, workers: int = 1) -> dict:
    if hasattr(os, "sched_setaffinity") and workers == 1:
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core
    import pdsim
    from pdsim.report.outputs import write_run_outputs
    from pdsim.sim.world import World
    from pdsim.workload import materialize

    row: dict = {"requests": n, "fleet": fleet, "replicas": replicas, "workers": workers,
                 "simpy_events_per_s": simpy_events_per_s()}
    sets = []
    if fleet > 1 and replicas:
        sets = [f"replicas.count={fleet}"]
    elif fleet > 1:
        sets = [f"cluster.prefill[0].count={2 * fleet}", f"cluster.decode[0].count={fleet}"]
    sc = pdsim.load_scenario(SCENARIO, sets)
    t0 = time.perf_counter()
    base = materialize(sc.scenario.workload, sc.scenario.seed, sc.base_dir)
    table = tiled_table(base, n, fleet)
    row["workload_s"] = time.perf_counter() - t0
    row["peak_mib_workload"] = peak_mib()
    t0 = time.perf_counter()
    if replicas:
        from pdsim.sim import replicas as fleet_replicas

        rec = fleet_replicas.simulate(sc, table, workers)
    else:
        rec = World(sc, table).run()
    del table, base
    from pdsim.sim import memory

    memory.release()  # as pdsim.simulate does after a large run
    row["simulate_s"] = time.perf_counter() - t0
    row["sim_time_s"] = rec.end_s
    row["gpus"] = rec.gpus
    row["engine_steps"] = rec.events
    row["requests_per_s"] = n / row["simulate_s"]
    row["peak_mib_simulate"] = peak_mib()
    t0 = time.perf_counter()
    res = pdsim.metrics.Results(rec, sc)
    s = res.summary()
    row["metrics_s"] = time.perf_counter() - t0
    row["peak_mib_metrics"] = peak_mib()
    row["completed"] = s["completed"]
    row["mean_ttft_ms"] = s["mean_ttft_ms"]
    row["p99_itl_ms"] = s["p99_itl_ms"]
    if report:
        with tempfile.TemporaryDirectory() as d:
            t0 = time.perf_counter()
            write_run_outputs(res, d, report=True)
            row["outputs_s"] = time.perf_counter() - t0
            row["output_mib"] = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d)) / 2**20
        row["peak_mib_outputs"] = peak_mib()
    row["peak_mib"] = peak_mib()
    row["peak_mib_workers"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="12031,120310,1203100", help="comma-separated request counts")
    ap.add_argument("--fleet", type=int, default=1, help="copies of the P4D6 groups (80 GPUs each)")
    ap.add_argument("--replicas", action="store_true",
                    help="the fleet as independent replicas of P4D6 (replicas.count), not one router over all")
    ap.add_argument("--workers", type=int, default=1, help="worker processes for --replicas")
    ap.add_argument("--no-report", action="store_true", help="skip the output files and report.html")
    ap.add_argument("--json", help="write the rows to this file")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.fleet, not args.no_report, args.replicas, args.workers)))
        return
    rows = []
    print(f"{'requests':>10} {'GPUs':>5} {'sim s':>8} {'req/s':>8} {'steps':>11} {'metrics s':>9} {'outputs s':>9} "
          f"{'peak MiB':>9} {'(sim / metrics / outputs)':>26} {'SimPy ev/s':>10}")
    for n in [int(x) for x in args.sizes.split(",")]:
        cmd = [sys.executable, __file__, "--child", str(n), "--fleet", str(args.fleet), "--workers", str(args.workers)]
        if args.no_report:
            cmd.append("--no-report")
        if args.replicas:
            cmd.append("--replicas")
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            print(f"{n:>10} failed:\n{p.stderr[-2000:]}")
            continue
        r = json.loads(p.stdout.strip().splitlines()[-1])
        rows.append(r)
        phases = f"{r['peak_mib_simulate']:,.0f} / {r['peak_mib_metrics']:,.0f} / {r.get('peak_mib_outputs', 0):,.0f}"
        print(f"{n:>10,} {r['gpus']:>5} {r['simulate_s']:>8.1f} {r['requests_per_s']:>8,.0f} {r['engine_steps']:>11,} "
              f"{r['metrics_s']:>9.1f} {r.get('outputs_s', 0):>9.1f} {r['peak_mib']:>9,.0f} {phases:>26} "
              f"{r['simpy_events_per_s']:>10,.0f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
