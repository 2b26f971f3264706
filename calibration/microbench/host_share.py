"""How much of the host's CPUs a recording's engine really got: the kernel's own per-process run
and run-queue wait times (``/proc/<pid>/schedstat``: ns on a CPU, ns runnable but waiting for
one) and the machine's CPU time by kind (``/proc/stat``: busy, idle, and ``steal``, time the
hypervisor gave this VM's virtual CPUs to someone else). Linux only; seconds.

A process that waited ``wait`` while it ran ``cpu`` was stretched by ``(cpu + wait) / cpu``: how
long it stood runnable without a core, whatever took the core (the engine's other processes, the
client, other jobs on the host). For the worker this is NOT the factor by which the model's steps
took longer (``host.cpu_stretch``): on the CPU validation host it read 1.17 and 1.19 in two knee
runs whose steps took the same time shape for shape, as the worker waits mostly while it polls for
the next step (specs/host.py); the step-time ratio is measured by timing the same steps. Used by
``validation/cpu-vllm/here.py --trace-steps`` around each recording.
"""
from __future__ import annotations

import os
from pathlib import Path

PROC = Path("/proc")
TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _session(pid: int) -> int | None:
    try:
        # "pid (comm) state ppid pgrp session ...": comm may hold spaces, split after its ')'
        fields = (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[3])
    except (OSError, IndexError, ValueError):
        return None


def processes(session: int) -> dict[int, str]:
    """pid -> command name of every live process in the session ``session`` (a server started
    with ``start_new_session=True``: its API server, engine core and workers)."""
    out = {}
    for p in PROC.iterdir():
        if p.name.isdigit() and _session(int(p.name)) == session:
            try:
                out[int(p.name)] = (p / "comm").read_text().strip()
            except OSError:
                continue
    return out


def snapshot(pids: dict[int, str]) -> dict:
    """Run and wait ns of each of ``pids`` (those still alive) and the machine's CPU ticks."""
    procs = {}
    for pid, name in pids.items():
        try:
            run, wait, _ = (int(x) for x in (PROC / str(pid) / "schedstat").read_text().split()[:3])
        except (OSError, ValueError):
            continue
        procs[pid] = {"name": name, "run_ns": run, "wait_ns": wait}
    cpu = [int(x) for x in (PROC / "stat").read_text().splitlines()[0].split()[1:]]
    # user nice system idle iowait irq softirq steal [guest guest_nice: inside user/nice]
    busy = sum(cpu[:3]) + sum(cpu[5:7])
    return {"procs": procs, "busy_ticks": busy, "idle_ticks": cpu[3] + cpu[4],
            "steal_ticks": cpu[7] if len(cpu) > 7 else 0}


def share(before: dict, after: dict, wall_s: float, cores: int) -> dict:
    """What changed between two snapshots ``wall_s`` apart on ``cores`` CPUs: per process its CPU
    seconds, run-queue wait seconds and stretch; the engine's processes' CPU seconds against the
    whole machine's busy seconds (the rest: the client, other jobs), and the steal."""
    per = {}
    own = 0.0
    for pid, a in after["procs"].items():
        b = before["procs"].get(pid, {"run_ns": 0, "wait_ns": 0})
        run, wait = (a["run_ns"] - b["run_ns"]) / 1e9, (a["wait_ns"] - b["wait_ns"]) / 1e9
        own += run
        per[f"{a['name']}[{pid}]"] = {"cpu_s": round(run, 3), "wait_s": round(wait, 3),
                                      "stretch": round((run + wait) / run, 3) if run > 0 else None}
    busy = (after["busy_ticks"] - before["busy_ticks"]) / TICK
    return {"wall_s": round(wall_s, 3), "cores": cores, "processes": per,
            "engine_cpu_s": round(own, 3), "machine_busy_s": round(busy, 3),
            "other_cpu_s": round(max(busy - own, 0.0), 3),
            "steal_s": round((after["steal_ticks"] - before["steal_ticks"]) / TICK, 3)}
