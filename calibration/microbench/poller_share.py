"""What a busy-waiting process takes from a worker on its core: the input of ``host.pollers`` /
``host.autogroup`` (pdsim/specs/host.py).

vLLM V1's engine core waits for its worker's answer by spinning on ``sched_yield()``
(``shm_broadcast.SpinCondition.wait``, for 1 s after its last read). Whether that spinning costs
another server's worker anything depends on the kernel's scheduling groups: a process that yields
gives the core to every runnable process of its own group, but with autogroup scheduling on
(``/proc/sys/kernel/sched_autogroup_enabled`` = 1) each session is a group of its own, and the fair
scheduler shares a core equally between groups whatever they do with their share.

This times a fixed CPU-bound job (single-thread float32 GEMMs) pinned to one core: alone, beside a
``sched_yield`` loop pinned to the same core in the same session, and beside one in a session of its
own (as ``pdsim.replay.local_server`` starts each server), plus a plain busy loop for reference, and
reports each as a slowdown (median of ``--repeats``). Under the host's current setting; it does not
change it. A slowdown near 2 for "yield, other session" means ``host.autogroup: true`` for a
deployment whose servers run in sessions of their own; near 1, false.

    python calibration/microbench/poller_share.py [--core 0] [--repeats 5] [--json out.json]

Measured on the 2-core Zen 1 validation host (2026-11-27): with autogroup on, 1.02x (same
session) and 2.07x (other session), 0.84x and 2.52x, 1.04x and 2.94x in two more runs; with it off
0.87-1.06x (validation/cpu-vllm-calibration/zen1/host-contention/); a busy
loop 1.69-2.94x either way.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout: pdsim beside it
from pdsim.specs.machine import sched_autogroup  # noqa: E402

LOOPS = {"yield": "import os\nos.sched_setaffinity(0, {%d})\nwhile True:\n    os.sched_yield()\n",
         "busy": "import os\nos.sched_setaffinity(0, {%d})\nwhile True:\n    pass\n"}


def job(core: int, reps: int = 40, n: int = 384) -> float:
    """Wall seconds of ``reps`` n x n float32 GEMMs on ``core`` (numpy, one thread)."""
    os.sched_setaffinity(0, {core})
    a = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    t = time.perf_counter()
    for _ in range(reps):
        a @ a
    return time.perf_counter() - t


def beside(kind: str, new_session: bool, core: int, repeats: int) -> list[float]:
    """The job's times with a ``kind`` loop pinned to the same core."""
    p = subprocess.Popen([sys.executable, "-c", LOOPS[kind] % core], start_new_session=new_session)
    try:
        time.sleep(0.5)  # the loop is running
        return [job(core) for _ in range(repeats)]
    finally:
        p.kill()
        p.wait()


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
    os.environ["OMP_NUM_THREADS"] = "1"
    alone = float(np.median([job(a.core) for _ in range(a.repeats)]))
    out = {"autogroup": sched_autogroup(), "core": a.core, "alone_s": alone, "slowdown": {}}
    for kind in ("yield", "busy"):
        for new in (False, True):
            t = float(np.median(beside(kind, new, a.core, a.repeats)))
            out["slowdown"][f"{kind}, {'other' if new else 'same'} session"] = round(t / alone, 3)
    ag = out["autogroup"]
    print(f"autogroup scheduling: {'not built in' if ag is None else ('on' if ag else 'off')}; the job alone "
          f"{alone * 1e3:.0f} ms")
    for k, v in out["slowdown"].items():
        print(f"  beside a {k + ' loop:':<28} {v:.2f}x")
    other = out["slowdown"]["yield, other session"]
    print(f"=> host.autogroup: {'true' if other > 1.5 else 'false'} (a poller in another session costs {other:.2f}x)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return out


if __name__ == "__main__":
    main()
