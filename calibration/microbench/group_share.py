"""How the kernel shares a core between scheduling groups that also load other cores: the check of
``pdsim/costs/group_share.py`` (the price ``sim/host_cores.py`` gives a server's spinning engine core
under autogroup scheduling).

Each arrangement places one timed CPU-bound job (``poller_share.py``'s: single-thread float32 GEMMs,
pinned, its thread count checked) on ``--core`` in a session of its own, with busy loops
(``while True: pass``) and ``sched_yield`` loops pinned to given cores, each set in the job's session
or in sessions of their own (``start_new_session``: each its own autogroup when autogroup
scheduling is on). The job's time over its time alone is compared with the price's slowdown for
the same arrangement: 1 / the speed ``autogroup_speeds`` gives the job (a group's weight on a CPU =
its runnable processes there over all of its runnable processes; a yielding process counts in its
group's load but gives its turn to the group's working ones).

    python calibration/microbench/group_share.py [--core 0] [--rounds 5] [--json out.json]

Rounds are interleaved and rotated (each round runs every arrangement once, starting one later);
the median of the rounds is reported. Needs two cores and autogroup scheduling on
(``/proc/sys/kernel/sched_autogroup_enabled`` = 1) to test the price; with it off it still times the
arrangements (every process then weighs the same and yielders nothing) and says so.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout: pdsim beside it
from pdsim.costs.group_share import autogroup_speeds
from pdsim.specs.machine import sched_autogroup


def _poller_share():
    spec = importlib.util.spec_from_file_location("poller_share", Path(__file__).with_name("poller_share.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


PS = _poller_share()
LOOP = {"busy": "import os\nos.sched_setaffinity(0, {%d})\nwhile True:\n    pass\n",
        "yield": "import os\nos.sched_setaffinity(0, {%d})\nwhile True:\n    os.sched_yield()\n"}

#: name -> (loops in the job's session, [loops of each other session]); a loop = (kind, "job"/"other"
#: core). What each stands for in a 1P1D deployment (P = the job's server, D = the other):
ARRANGEMENTS: dict[str, tuple[list, list]] = {
    "alone": ([], []),
    "a poller of another session on the job's core": ([], [[("yield", "job")]]),
    "that poller's session busy on the other core (D's engine core and worker)": (
        [], [[("yield", "job"), ("busy", "other")]]),
    "and the job's session polling on the other core (P's engine core there)": (
        [("yield", "other")], [[("yield", "job"), ("busy", "other")]]),
    "the job's session with a poller and a busy process on the other core": (
        [("yield", "other"), ("busy", "other")], [[("yield", "job"), ("busy", "other")]]),
    "as the third, and a busy third session on the job's core (a proxy)": (
        [("yield", "other")], [[("yield", "job"), ("busy", "other")], [("busy", "job")]]),
    "as the third, the other session also busy on the job's core (D's API server)": (
        [("yield", "other")], [[("yield", "job"), ("busy", "job"), ("busy", "other")]]),
    "the job's own poller beside it, the other session's as the second": (
        [("yield", "job")], [[("yield", "job"), ("busy", "other")]]),
}


def priced(own: list, others: list[list]) -> float:
    """The price's slowdown of the job (1 / its speed) in an arrangement, autogroup on."""
    runnable: list[dict] = [{}, {}]  # CPU 0 = the job's, 1 = the other
    for g, loops in enumerate([[("job", "job")] + own] + others):
        for kind, where in loops:
            c = 0 if where == "job" else 1
            w, s = runnable[c].get(g, (0.0, 0.0))
            runnable[c][g] = (w + (kind != "yield"), s + (kind == "yield"))
    speeds, _ = autogroup_speeds(runnable, [0.0, 0.0])
    return 1.0 / speeds[0][0]


def _shell(loops: list, cores: dict[str, int], tag: str) -> str:
    out = ""
    for i, (kind, where) in enumerate(loops):
        path = Path(f"/tmp/group_share_{os.getpid()}_{tag}_{i}.py")
        path.write_text(LOOP[kind] % cores[where])
        out += f"{sys.executable} {path} & "
    return out


def timed(own: list, others: list[list], cores: dict[str, int], reps: int) -> float:
    """Wall seconds of the job in one arrangement (its loops started 0.5 s before, killed after)."""
    procs = [subprocess.Popen(["bash", "-c", _shell(s, cores, f"o{k}") + "wait"], start_new_session=True)
             for k, s in enumerate(others)]
    try:
        time.sleep(0.5)
        job = PS.JOB % {"core": cores["job"], "n": 384, "reps": reps}
        path = Path(f"/tmp/group_share_{os.getpid()}_job.py")
        path.write_text(job)
        sh = _shell(own, cores, "own") + f"{sys.executable} {path}; kill $(jobs -p) 2>/dev/null; true"
        out = subprocess.run(["bash", "-c", sh], start_new_session=True, env={**os.environ, **PS.ONE_THREAD},
                             capture_output=True, text=True, check=True).stdout.split()
    finally:
        for p in procs:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    if len(out) < 2 or out[1] != "1":
        raise RuntimeError(f"group_share: the timed job reported {out!r}, expected its time and 1 thread")
    return float(out[0])


def measure(core: int, other: int, rounds: int, reps: int = 240) -> dict:
    names = list(ARRANGEMENTS)
    times: dict[str, list[float]] = {k: [] for k in names}
    cores = {"job": core, "other": other}
    for r in range(rounds):
        for k in names[r % len(names):] + names[:r % len(names)]:
            times[k].append(timed(*ARRANGEMENTS[k], cores, reps))
    alone = statistics.median(times["alone"])
    rows = {}
    for k in names:
        s = [t / alone for t in times[k]]
        rows[k] = {"measured": round(statistics.median(s), 3), "rounds": [round(x, 3) for x in s],
                   "priced": round(priced(*ARRANGEMENTS[k]), 3)}
    return {"autogroup": sched_autogroup(), "kernel": os.uname().release, "cores": [core, other],
            "alone_s": alone, "rounds": rounds, "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "arrangements": rows}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--core", type=int, default=0, help="the job's core (default 0)")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (median taken)")
    ap.add_argument("--json", help="write the figures here")
    a = ap.parse_args(argv)
    allowed = sorted(os.sched_getaffinity(0))
    if a.core not in allowed:
        ap.error(f"--core {a.core}: this process may not run there (allowed: {allowed})")
    if len(allowed) < 2:
        ap.error("needs two cores: every arrangement loads the job's core and another")
    if a.rounds < 1:
        ap.error(f"--rounds: expected >= 1, got {a.rounds}")
    out = PS.measured_or_exit(measure, a.core, next(c for c in allowed if c != a.core), a.rounds)
    ag = out["autogroup"]
    print(f"autogroup scheduling: {PS.autogroup_said(ag)}{'' if ag else ' (the price below is for autogroup on)'}; "
          f"the job alone {out['alone_s'] * 1e3:.0f} ms")
    for k, v in out["arrangements"].items():
        print(f"  {k:<78} measured {v['measured']:.2f}x  priced {v['priced']:.2f}x")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
