"""Peak memory of the whole ``pdsim run`` pipeline at a given request count (a script, not a timed test).

    python benchmarks/run_memory.py --runs A:1000000,B:10000000 [--json out.json]

Each run is the README's exact command (simulate, summary, verdict facts, every output file:
summary.json, requests and timeline Parquet, report.html; verdict re-simulation off) in its own
process, with ``PDSIM_MAX_REQUESTS`` raised to the run's size. Its peak RSS is the kernel's
``ru_maxrss`` for that process (``os.wait4``: the figure ``/usr/bin/time -v`` prints as "Maximum
resident set size"), its wall and CPU time the process's own; engine steps, completed requests and
the simulate wall time come from the run's summary.json.

Workloads (P4D6, ``dsv3-h800-p4d6``, 80 H800 GPUs; synthetic, log-normal prompts and outputs):
A: prompts of mean 4,000 tokens at 3.4 requests/s (~16 engine steps a request);
B: prompts of mean 1,000 tokens at 12 requests/s (~5 engine steps a request: 10M requests
simulate ~9.7 days of traffic in about half an hour of CPU).

The bounds are issue 27's: 1M requests under 1.5 GB peak, 10M under 12 GB (GB = 1e9 bytes).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SCENARIO = "dsv3-h800-p4d6"
# (rate requests/s, prompt mean, prompt std): the rest of the shape is common (below).
WORKLOADS = {"A": (3.4, 4000, 3000), "B": (12, 1000, 750)}
# Issue 27's bounds on the whole pipeline's peak, bytes, by request count.
BOUNDS = {1_000_000: 1.5e9, 10_000_000: 12e9}
# A bare size picks the README's workload for it: A below this many requests, B from it on
# (A at 10M would be 160M engine steps, hours on this machine).
B_FROM = 5_000_000


def parse_runs(text: str) -> list[tuple[str, int]]:
    """``"A:1000000,B:10000000"`` or ``"1000000,10000000"`` -> [(workload, requests), ...]."""
    runs = []
    for item in (s.strip() for s in text.split(",") if s.strip()):
        kind, _, size = item.rpartition(":")
        try:
            n = int(size.replace("_", ""))
        except ValueError:
            n = 0
        if n < 1:
            raise SystemExit(f"--pdsim-run: {item!r}: expected a request count >= 1, optionally as WORKLOAD:COUNT "
                             f"(workloads {', '.join(WORKLOADS)})")
        kind = kind.upper() or ("B" if n >= B_FROM else "A")
        if kind not in WORKLOADS:
            raise SystemExit(f"--pdsim-run: {item!r}: unknown workload {kind!r}; expected one of "
                             f"{', '.join(WORKLOADS)}")
        runs.append((kind, n))
    if not runs:
        raise SystemExit("--pdsim-run: expected comma-separated request counts, e.g. 1000000,10000000")
    return runs


def sets(kind: str, n: int) -> list[str]:
    """The ``--set`` overrides of workload ``kind`` at ``n`` requests (the README's command)."""
    rate, mean, std = WORKLOADS[kind]
    return ["workload.kind=synthetic", f"workload.num_requests={n}", f"workload.rate={rate:g}",
            "workload.input.dist=lognormal", f"workload.input.mean={mean}", f"workload.input.std={std}",
            "workload.input.max=32000", "workload.output.dist=lognormal", "workload.output.mean=340",
            "workload.output.std=250", "workload.output.max=4000"]


def argv(kind: str, n: int, out: str) -> list[str]:
    """``pdsim run``'s arguments after ``python -m pdsim``."""
    args = ["run", SCENARIO]
    for s in sets(kind, n):
        args += ["--set", s]
    return args + ["--no-verdict-check", "--no-progress", "--out", out]


def command_text(kind: str, n: int) -> str:
    """The command a reader types, wrapped as the README shows it (under ``/usr/bin/time -v``)."""
    words = argv(kind, n, "OUT")
    head = f"PDSIM_MAX_REQUESTS={n} nice -n 19 /usr/bin/time -v python -m pdsim {words[0]} {words[1]}"
    lines, line = [], head
    k = 2
    while k < len(words):
        word = f"{words[k]} {words[k + 1]}" if words[k].startswith("--") and words[k] in ("--set", "--out") \
            else words[k]
        k += 2 if " " in word else 1
        if len(line) + 1 + len(word) > 110:
            lines.append(line + " \\")
            line = "  " + word
        else:
            line += " " + word
    return "\n".join(lines + [line])


def measure(kind: str, n: int) -> dict:
    """One ``pdsim run`` of workload ``kind`` at ``n`` requests in its own process; its figures."""
    out_root = Path(tempfile.mkdtemp(prefix="pdsim-run-memory-"))
    try:
        out = out_root / "out"
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PDSIM_MAX_REQUESTS": str(max(n, 1))}
        cmd = [sys.executable, "-m", "pdsim", *argv(kind, n, str(out))]
        print(f"$ PDSIM_MAX_REQUESTS={n} python -m pdsim run {SCENARIO} (workload {kind}, {n:,} requests)", flush=True)
        load0 = os.getloadavg()[0]
        t0 = time.perf_counter()
        with open(out_root / "log.txt", "w") as log:
            proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            tail = (out_root / "log.txt").read_text(errors="replace")[-2000:]
            raise SystemExit(f"pdsim run (workload {kind}, {n:,} requests) exited {proc.returncode}:\n{tail}")
        s = json.loads((out / "summary.json").read_text())
        peak = usage.ru_maxrss * 1024  # Linux: kilobytes
        bound = BOUNDS.get(n)
        return {"workload": kind, "requests": n, "command": command_text(kind, n), "peak_bytes": peak,
                "peak_mib": peak / 2**20, "bytes_per_request": peak / n, "wall_s": wall,
                "cpu_s": usage.ru_utime + usage.ru_stime, "simulate_s": s["wall_s"], "engine_steps": s["sim_events"],
                "completed": s["completed"], "dropped": s["dropped"], "sim_time_s": s["sim_time_s"],
                "output_bytes": {f.name: f.stat().st_size for f in sorted(out.iterdir())},
                "bound_bytes": bound, "within_bound": None if bound is None else peak < bound,
                "load_avg": {"start": load0, "end": os.getloadavg()[0]}}
    finally:
        shutil.rmtree(out_root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", default="A:1000000,B:10000000", help="WORKLOAD:COUNT,... or COUNT,... (see above)")
    ap.add_argument("--json", help="write the rows to this file")
    args = ap.parse_args()
    rows = [measure(kind, n) for kind, n in parse_runs(args.runs)]
    for r in rows:
        print(f"{r['workload']} {r['requests']:>11,}: peak {r['peak_mib']:,.0f} MiB, {r['bytes_per_request']:,.0f} B a "
              f"request, {r['engine_steps']:,} steps, {r['wall_s']:,.0f} s wall, bound "
              f"{'-' if r['bound_bytes'] is None else ('met' if r['within_bound'] else 'MISSED')}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
