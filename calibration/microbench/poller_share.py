"""What a busy-waiting process takes from a worker on its core: the input of ``host.pollers`` /
``host.autogroup`` (pdsim/specs/host.py).

vLLM V1's engine core waits for its worker's answer by spinning on ``sched_yield()``
(``shm_broadcast.SpinCondition.wait``, for 1 s after its last read). Whether that spinning costs
another server's worker anything depends on the kernel's scheduling groups: a process that yields
gives the core to every runnable process of its own group, but with autogroup scheduling on
(``/proc/sys/kernel/sched_autogroup_enabled`` = 1) each session is a group of its own, and the fair
scheduler shares a core between groups whatever they do with their share, each weighing its runnable
load on that core over its load on all cores (``group_share.py`` checks that price in eight
arrangements).

This times a fixed CPU-bound job (single-thread float32 GEMMs) pinned to one core: alone, beside a
``sched_yield`` loop pinned to the same core in the same session, and beside one in a session of its
own (as ``pdsim.replay.local_server`` starts each server), plus a plain busy loop for reference, and
reports each as a slowdown (median of ``--repeats``). Under the host's current setting; it does not
change it. A slowdown near 2 for "yield, other session" means ``host.autogroup: true`` for a
deployment whose servers run in sessions of their own; near 1, false.

    python calibration/microbench/poller_share.py [--core 0] [--repeats 5] [--json out.json]

The job runs in a child process of its own whose BLAS is held to one thread before numpy loads
(``OPENBLAS_NUM_THREADS``, ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS`` = 1) and pinned before it starts;
it reports its thread count and a job that ran on more than one thread is refused, not timed. Until
2026-11-28 the job ran in this process, where numpy had loaded before ``OMP_NUM_THREADS`` was set:
OpenBLAS ran the GEMMs on two threads and only the calling one was pinned, so the job also waited
for a thread on the other core. That inflated every figure: on the Intel host of 2026-11-28 a busy
loop pinned to the *other* core then cost the job 7.5-11.3x, against 0.84-0.87x with one thread.

Measured with one thread on the 2-core Intel validation host (family 6 model 207, kernel 6.18,
2026-11-28; validation/cpu-vllm-calibration/emr2b/host-contention/): with autogroup on, a
``sched_yield`` loop in another session 1.68-2.10x, in the same session ~1x, and one in another
session whose group also keeps the other core busy (a server's engine core beside its worker)
1.49-1.56x, the group's weight being shared between the cores it loads. The Zen 1 host's figures of
2026-11-27 (validation/cpu-vllm-calibration/zen1/host-contention/: 2.07-2.94x other session, 0.84-1.04x
same session, 0.87-1.06x with autogroup off) were taken with the two-thread job: their split between
same and other session stands, their size is an upper bound.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout: pdsim beside it
from pdsim.specs.machine import sched_autogroup  # noqa: E402

LOOPS = {"yield": "import os\nos.sched_setaffinity(0, {%(core)d})\nwhile True:\n    os.sched_yield()\n",
         "busy": "import os\nos.sched_setaffinity(0, {%(core)d})\nwhile True:\n    pass\n",
         # a server's engine core beside its busy worker: the yield loop on the job's core, a busy loop
         # of the same session on the other core (a forked child, so one group loads both cores)
         "yield+busy": "import os\nif os.fork() == 0:\n    os.sched_setaffinity(0, {%(other)d})\n"
                       "    while True:\n        pass\nos.sched_setaffinity(0, {%(core)d})\nwhile True:\n"
                       "    os.sched_yield()\n"}


#: the timed job, run in a child: pinned first, numpy loaded after the thread limits, its threads counted
JOB = """import os, time
os.sched_setaffinity(0, {%(core)d})
import numpy as np
a = np.random.default_rng(0).standard_normal((%(n)d, %(n)d)).astype(np.float32)
a @ a
t = time.perf_counter()
for _ in range(%(reps)d):
    a @ a
dt = time.perf_counter() - t
print(dt, len(os.listdir("/proc/self/task")))
"""
ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def job(core: int, reps: int = 40, n: int = 384) -> float:
    """Wall seconds of ``reps`` n x n float32 GEMMs on ``core``, in a child process on one thread.
    Raises RuntimeError if the child ran more than one thread (its BLAS ignored the limits)."""
    out = subprocess.run([sys.executable, "-c", JOB % {"core": core, "n": n, "reps": reps}],
                         env={**os.environ, **ONE_THREAD}, capture_output=True, text=True, check=True)
    dt, threads = out.stdout.split()
    if int(threads) != 1:
        raise RuntimeError(f"poller_share: the timed job ran {threads} threads, expected 1 (its BLAS did not "
                           "take OPENBLAS_NUM_THREADS / OMP_NUM_THREADS / MKL_NUM_THREADS = 1): a thread on "
                           "another core would be timed too")
    return float(dt)


def beside(kind: str, new_session: bool, core: int, repeats: int, other: int | None = None) -> list[float]:
    """The job's times with a ``kind`` loop pinned to the same core (``yield+busy``: and its busy
    sibling on ``other``; in a session of its own only, whose process group is killed after)."""
    if kind == "yield+busy" and (other is None or not new_session):
        raise ValueError("yield+busy: needs another core and a session of its own")
    p = subprocess.Popen([sys.executable, "-c", LOOPS[kind] % {"core": core, "other": other}],
                         start_new_session=new_session)
    try:
        time.sleep(0.5)  # the loop is running
        return [job(core) for _ in range(repeats)]
    finally:
        if new_session:
            os.killpg(p.pid, signal.SIGKILL)  # the forked sibling too
        else:
            p.kill()
        p.wait()


def measure(core: int, repeats: int) -> dict:
    """The job alone and beside each loop: its slowdowns (medians of ``repeats``)."""
    alone = float(np.median([job(core) for _ in range(repeats)]))
    out = {"autogroup": sched_autogroup(), "core": core, "alone_s": alone, "slowdown": {}}
    for kind in ("yield", "busy"):
        for new in (False, True):
            t = float(np.median(beside(kind, new, core, repeats)))
            out["slowdown"][f"{kind}, {'other' if new else 'same'} session"] = round(t / alone, 3)
    others = sorted(os.sched_getaffinity(0) - {core})
    if others:  # the engine's arrangement: the poller's group also keeps another core busy
        t = float(np.median(beside("yield+busy", True, core, repeats, others[0])))
        out["slowdown"]["yield, other session, its group busy on another core"] = round(t / alone, 3)
    return out


def measured_or_exit(measure_fn, *args) -> dict:
    """``measure_fn(*args)``, or exit 2 with its one-line reason when a timed job ran on more threads
    than one (RuntimeError): nothing is timed then."""
    try:
        return measure_fn(*args)
    except RuntimeError as err:
        print(err, file=sys.stderr)
        raise SystemExit(2) from None


def autogroup_said(ag: int | None) -> str:
    """The host's autogroup setting in words."""
    return "not built in" if ag is None else ("on" if ag else "off")


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--core", type=int, default=0, help="the core to time on (default 0)")
    ap.add_argument("--repeats", type=int, default=5, help="timed jobs per arrangement (median taken)")
    ap.add_argument("--json", help="write the figures here")
    a = ap.parse_args(argv)
    if a.core not in os.sched_getaffinity(0):
        ap.error(f"--core {a.core}: this process may not run there (allowed: {sorted(os.sched_getaffinity(0))})")
    if a.repeats < 1:
        ap.error(f"--repeats: expected >= 1, got {a.repeats}")
    out = measured_or_exit(measure, a.core, a.repeats)
    print(f"autogroup scheduling: {autogroup_said(out['autogroup'])}; the job alone {out['alone_s'] * 1e3:.0f} ms")
    for k, v in out["slowdown"].items():
        print(f"  beside a {k + ' loop:':<55} {v:.2f}x")
    other = out["slowdown"]["yield, other session"]
    print(f"=> host.autogroup: {'true' if other > 1.5 else 'false'} (a poller in another session costs {other:.2f}x)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return out


if __name__ == "__main__":
    main()
