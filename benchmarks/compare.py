"""Speed and memory as a same-run ratio against a named commit (a script, not a timed test).

    python benchmarks/compare.py --baseline 01d7515 [--rounds 7] [--json out.json]

A speed claim is a ratio measured in one run, never two absolute figures from different days: the
machines are shared and noisy. So this script

- checks the baseline commit out in a temporary git worktree (removed afterwards);
- runs ``bench_core.py --repeat 1`` from the current tree and from the baseline, and bare SimPy
  (``bench_scale.simpy_events_per_s``) as the machine's normaliser, as separate processes in every
  round, the order rotated from round to round so neither side always runs first or last;
- records per process its simulate wall time (bench_core's own figure), its whole wall and CPU
  time and its peak RSS (``os.wait4``: this child alone), and the machine's load average before
  each round;
- reports the median and spread (min..max) over rounds of the per-round ratios
  baseline / current (above 1: the current tree is faster or smaller), and of SimPy's rate, so a
  reader sees how noisy the machine was.

Results must match: the completed count and mean TTFT of both sides are printed side by side, and a
difference is flagged (a speed-up that changes results is not a like-for-like comparison).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def _child(cmd: list[str], cwd: Path) -> dict:
    """Run ``cmd`` with ``cwd`` first on the import path; its wall, CPU seconds and peak RSS alone."""
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    out, err = proc.stdout.read(), proc.stderr.read()
    proc.stdout.close()
    proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed in {cwd}:\n{err[-2000:]}")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "peak_mib": usage.ru_maxrss / 1024,
            "stdout": out}


def _bench_core(tree: Path, scenario: str, tmp: Path) -> dict:
    out = tmp / f"core-{tree.name}.json"
    r = _child([sys.executable, str(tree / "benchmarks" / "bench_core.py"), "--repeat", "1", "--scenario", scenario,
                "--json", str(out)], tree)
    fig = json.loads(out.read_text())
    return {**{k: r[k] for k in ("wall_s", "cpu_s", "peak_mib")}, "simulate_s": fig["best_wall_s"],
            "requests": fig["requests"], "steps": fig["engine_steps"]}


def _simpy(tmp: Path) -> float:
    code = "import sys; sys.path.insert(0, %r); from bench_scale import simpy_events_per_s; print(simpy_events_per_s())"
    r = _child([sys.executable, "-c", code % str(HERE)], tmp)
    return float(r["stdout"].strip().splitlines()[-1])


def _summary(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def compare(baseline: str, rounds: int, scenario: str) -> dict:
    base_sha = _git("rev-parse", "--short", baseline)
    head = _git("rev-parse", "--short", "HEAD")
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no"))
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        base_tree = tmp / "baseline"
        _git("worktree", "add", "--detach", str(base_tree), base_sha)
        try:
            jobs = {"current": lambda: _bench_core(ROOT, scenario, tmp),
                    "baseline": lambda: _bench_core(base_tree, scenario, tmp),
                    "simpy": lambda: _simpy(tmp)}
            names = list(jobs)
            per_round = []
            for k in range(rounds):
                order = names[k % len(names):] + names[:k % len(names)]
                row: dict = {"order": order, "load_avg": os.getloadavg()[0]}
                for name in order:
                    row[name] = jobs[name]()
                    print(f"round {k + 1}/{rounds} {name}: "
                          f"{row[name] if name == 'simpy' else round(row[name]['simulate_s'], 3)}", flush=True)
                per_round.append(row)
        finally:
            _git("worktree", "remove", "--force", str(base_tree))
    ratio = {key: _summary([r["baseline"][key] / r["current"][key] for r in per_round])
             for key in ("simulate_s", "wall_s", "cpu_s", "peak_mib")}
    return {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "current": head + ("+changes" if dirty else ""), "baseline": base_sha, "scenario": scenario,
            "rounds": rounds, "machine": {"cores": os.cpu_count(), "python": platform.python_version(),
                                          "cpu": platform.processor() or platform.machine()},
            "ratio_baseline_over_current": ratio,
            "simpy_events_per_s": _summary([r["simpy"] for r in per_round]),
            "load_avg": _summary([r["load_avg"] for r in per_round]),
            "current_simulate_s": _summary([r["current"]["simulate_s"] for r in per_round]),
            "baseline_simulate_s": _summary([r["baseline"]["simulate_s"] for r in per_round]),
            "same_work": all(r["current"]["requests"] == r["baseline"]["requests"] for r in per_round),
            "steps": {"current": per_round[0]["current"]["steps"], "baseline": per_round[0]["baseline"]["steps"]},
            "rounds_raw": per_round}


def table(r: dict) -> str:
    q = r["ratio_baseline_over_current"]

    def cell(s: dict) -> str:
        return f"{s['median']:.2f}x ({s['min']:.2f}-{s['max']:.2f})"

    return "\n".join([
        f"Same-run comparison, {r['date']}: the tree at `{r['current']}` against `{r['baseline']}` "
        f"(`python benchmarks/compare.py --baseline {r['baseline']}`), `bench_core.py` on `{r['scenario']}`, "
        f"{r['rounds']} rounds interleaved with the order rotated; ratio = baseline / current (above 1: current "
        f"is faster or smaller), median (min-max over rounds). Bare SimPy in the same rounds: "
        f"{r['simpy_events_per_s']['median']:,.0f} events/s ({r['simpy_events_per_s']['min']:,.0f}-"
        f"{r['simpy_events_per_s']['max']:,.0f}); load average {r['load_avg']['median']:.1f} "
        f"({r['load_avg']['min']:.1f}-{r['load_avg']['max']:.1f}) "
        f"on {r['machine']['cores']} cores.", "",
        "| measure | baseline / current |", "|---|---|",
        f"| simulate wall time | {cell(q['simulate_s'])} |",
        f"| whole process wall time | {cell(q['wall_s'])} |",
        f"| whole process CPU time | {cell(q['cpu_s'])} |",
        f"| peak RSS | {cell(q['peak_mib'])} |",
        "", f"Engine steps: current {r['steps']['current']:,}, baseline {r['steps']['baseline']:,}"
        + ("" if r["steps"]["current"] == r["steps"]["baseline"] else " (results differ: not like for like)") + "."])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", required=True, help="commit (or tag, branch) to compare against")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--scenario", default="dsv3-h800-p4d6")
    ap.add_argument("--json", help="write every figure (and each round's raw numbers) here")
    args = ap.parse_args()
    if args.rounds < 1:
        raise SystemExit("--rounds: must be >= 1")
    r = compare(args.baseline, args.rounds, args.scenario)
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=2) + "\n")
    print(table(r))


if __name__ == "__main__":
    main()
