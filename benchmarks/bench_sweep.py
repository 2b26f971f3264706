"""Sweep benchmark (a script, not a timed test): the 108-configuration DeepSeek-V3 13-node
H800 sweep (5,000 requests each) on this machine's cores; reports total and per-configuration
wall time.

    python benchmarks/bench_sweep.py [--workers N] [--out DIR]
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
import time

from pdsim.explore import run_sweep
from pdsim.specs.catalog import workloads_dir


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int)
    ap.add_argument("--out")
    args = ap.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="pdsim-bench-sweep-")
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    df = run_sweep(workloads_dir() / "sweeps" / "dsv3-h800-13nodes.yaml", out, workers=args.workers, progress=False)
    wall = time.perf_counter() - t0
    ok = df[df["status"] == "ok"]
    print(f"configurations {len(df)} ({len(ok)} simulated, {len(df) - len(ok)} infeasible)")
    print(f"total wall     {wall:.1f} s")
    print(f"per simulated configuration  {wall / max(len(ok), 1):.2f} s wall "
          f"({ok['wall_s'].mean():.2f} s of simulation each on one core)")
    print(f"requests       {int(ok['completed'].sum() + ok['dropped'].sum()):,} simulated "
          f"({(ok['completed'].sum() + ok['dropped'].sum()) / wall:,.0f} per wall-second)")


if __name__ == "__main__":
    main()
