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

Around any command (a user's own ``pdsim replay``), with the engine's processes named by the
pid of the server you started (it and every process under it)::

    python calibration/microbench/host_share.py watch --pid SERVER_PID --out host.json -- \
        pdsim replay WORKLOAD --endpoint http://127.0.0.1:8000 --out runs/real

``host.json`` then holds each process's CPU and run-queue wait, the other work on the host
(``other_cpu_s``; ``other_cpu_s / wall_s`` is the scenario's ``host.background``) and the core
each process ran on (``placement``); ``exited`` names any of the server's processes that ended during
the command (their CPU counted up to their last sample).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # pdsim from this checkout

from pdsim.replay.local_server import session_processes as processes  # noqa: E402  (pid -> name of a session)

PROC = Path("/proc")


def stat_fields(path: Path) -> list[str]:
    """A ``/proc/.../stat`` line's fields after the command name (which may hold spaces and
    parentheses): index 0 is the state, 1 the parent pid, 11-12 user and system ticks, 36 the CPU
    it last ran on."""
    return path.read_text().rsplit(")", 1)[1].split()
TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


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


def descendants(pid: int) -> dict[int, str]:
    """pid -> command name of ``pid`` and every live process under it (``/proc/<pid>/stat``'s
    parent pid), however it was started (a terminal's ``vllm serve``, a script's Popen)."""
    parent: dict[int, int] = {}
    for p in PROC.iterdir():
        if p.name.isdigit():
            try:
                parent[int(p.name)] = int(stat_fields(p / "stat")[1])
            except (OSError, IndexError, ValueError):
                continue
    keep, todo = set(), [pid]
    while todo:
        q = todo.pop()
        if q in parent and q not in keep:
            keep.add(q)
            todo.extend(c for c, pp in parent.items() if pp == q)
    out = {}
    for q in sorted(keep):
        try:
            out[q] = (PROC / str(q) / "comm").read_text().strip()
        except OSError:
            continue
    return out


class CoreSampler:
    """Which core each process ran on: ``/proc/<pid>/stat`` field 39 (the CPU it last ran on)
    sampled every ``period_s`` in a thread, and its allowed CPUs (``sched_getaffinity``, what
    ``taskset -p`` shows). ``stop()`` returns per process its affinity, the share of samples on
    each core (``ran_on``, the main thread's) and the CPU seconds it spent on each core, all its
    threads (``cpu_s_on``: each thread's user + system ticks since its previous sample, put on the
    core it was on at this one; to ``period_s``, a thread's move between samples blurs it). The
    second is what a spinning process costs the other processes of a core: on 2026-11-28 it showed
    D's engine core taking 0.61-0.78 s of P's core in ~0.9 s prefills (validation/README.md, 'vLLM
    1P1D on a host whose kernels are fast'), where ``ran_on`` only said it sat there 66-72% of the
    time."""

    def __init__(self, procs: dict[int, str], period_s: float = 0.2):
        self.procs, self.period_s = procs, period_s
        self.counts: dict[int, dict[int, int]] = {pid: {} for pid in procs}
        self.ticks_on: dict[int, dict[int, int]] = {pid: {} for pid in procs}  # pid -> core -> ticks
        self._last_ticks: dict[tuple[int, int], int] = {}  # (pid, tid) -> user + system ticks
        self._hz = os.sysconf("SC_CLK_TCK")
        self.last_sched: dict[int, tuple[int, int]] = {}  # pid -> (run ns, wait ns) at its last sample
        self.affinity = {}
        for pid in procs:
            try:
                self.affinity[pid] = sorted(os.sched_getaffinity(pid))
            except OSError:
                self.affinity[pid] = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            for pid, c in self.counts.items():
                try:
                    cpu = int(stat_fields(PROC / str(pid) / "stat")[36])
                    run, wait = (int(x) for x in (PROC / str(pid) / "schedstat").read_text().split()[:2])
                    # read again while it runs: a command started as `taskset -c 1 ...` pins itself
                    # only after the spawn, where the first read saw every CPU
                    self.affinity[pid] = sorted(os.sched_getaffinity(pid))
                except (OSError, IndexError, ValueError):
                    continue
                c[cpu] = c.get(cpu, 0) + 1
                self.last_sched[pid] = (run, wait)
                self._thread_ticks(pid)

    def _thread_ticks(self, pid: int) -> None:
        """Each thread's ticks since its previous sample, on the core it is on now."""
        on = self.ticks_on[pid]
        try:
            tids = os.listdir(PROC / str(pid) / "task")
        except OSError:
            return
        for tid in tids:
            try:
                f = stat_fields(PROC / str(pid) / "task" / tid / "stat")
                cpu, ticks = int(f[36]), int(f[11]) + int(f[12])
            except (OSError, IndexError, ValueError):
                continue
            key = (pid, int(tid))
            before = self._last_ticks.get(key)
            self._last_ticks[key] = ticks
            if before is not None and ticks > before:
                on[cpu] = on.get(cpu, 0) + ticks - before

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join()
        out = {}
        for pid, name in self.procs.items():
            n = sum(self.counts[pid].values())
            out[f"{name}[{pid}]"] = {"affinity": self.affinity[pid],
                                     "ran_on": {str(k): round(v / n, 3) for k, v in sorted(self.counts[pid].items())}
                                     if n else {},
                                     "cpu_s_on": {str(k): round(v / self._hz, 2) for k, v in sorted(self.ticks_on[pid].items())}}
        return out


def keep_exited(before: dict, after: dict, sampler: CoreSampler) -> list[int]:
    """The processes of ``before`` gone by ``after`` (two ``snapshot``s), put back into ``after``
    with their run and wait ns at their last ``sampler`` sample (one sampling period short at most;
    no sample: no CPU counted): a server process that exited has no schedstat left, and its CPU is
    still the server's, not other work on the host. Their pids."""
    gone = [pid for pid in before["procs"] if pid not in after["procs"]]
    for pid in gone:
        b = before["procs"][pid]
        run, wait = sampler.last_sched.get(pid, (b["run_ns"], b["wait_ns"]))
        after["procs"][pid] = {"name": b["name"], "run_ns": run, "wait_ns": wait}
    return gone


class WatchError(Exception):
    """A bad argument of ``watch``, found before anything ran: one line, exit status 2."""


def watch(pids: list[int], command: list[str], cores: int | None = None) -> tuple[int, dict]:
    """Run ``command`` (its own process is counted as ``client``) and measure, over its span, the
    CPU and run-queue wait of every process under each of ``pids`` and of the command, the other
    work on the host and the core each ran on; ``exited``: server processes gone before the command
    ended (their CPU counted to their last sample). (exit status, the report)."""
    procs: dict[int, str] = {}
    for i, pid in enumerate(pids):
        found = descendants(pid)
        if not found:
            raise WatchError(f"--pid {pid}: no such process (give the pid of the server you started)")
        procs.update({q: f"{i}:{name}" for q, name in found.items()})
    cores = cores or os.cpu_count() or 1
    t0 = time.monotonic()
    snap0 = snapshot(procs)
    try:
        child = subprocess.Popen(command)
    except (FileNotFoundError, PermissionError) as err:
        raise WatchError(f"{command[0]}: no such command ({err.strerror})") from None
    client = "client:" + Path(command[0]).name
    sampler = CoreSampler({**procs, child.pid: client})
    rc = child.wait()
    span = time.monotonic() - t0
    snap1 = snapshot(procs)
    placement = sampler.stop()
    exited = keep_exited(snap0, snap1, sampler)
    report = {"command": command, "span_s": round(span, 3), "cores": cores,
              "share": share(snap0, snap1, span, cores), "placement": placement, "loadavg": os.getloadavg(),
              "exited": [f"{procs[pid]}[{pid}]" for pid in exited]}
    # the client has exited, so its schedstat is gone: its CPU from its rusage, its run-queue wait
    # from the last sample taken while it ran (up to one sampling period short)
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = ru.ru_utime + ru.ru_stime
    run_ns, wait_ns = sampler.last_sched.get(child.pid, (0, 0))
    report["share"]["processes"][f"{client}[{child.pid}]"] = {
        "cpu_s": round(cpu_s, 3), "wait_s": round(wait_ns / 1e9, 3),
        "stretch": round((run_ns + wait_ns) / run_ns, 3) if run_ns > 0 else None}
    report["share"]["client_cpu_s"] = round(cpu_s, 3)
    report["share"]["other_cpu_s"] = round(max(report["share"]["other_cpu_s"] - cpu_s, 0.0), 3)
    # from the figures as reported (other_cpu_s / span_s), so that a reader's division gives it back
    report["background"] = (round(report["share"]["other_cpu_s"] / report["span_s"], 3)
                            if report["span_s"] > 0 else None)
    return rc, report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="CPU, run-queue wait and cores of a server's processes around a command")
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("watch", help="run a command (e.g. pdsim replay) and measure the host around it")
    w.add_argument("--pid", type=int, action="append", required=True,
                   help="pid of a server you started (it and every process under it); repeat for several")
    w.add_argument("--out", required=True, help="JSON report")
    w.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run")
    args = ap.parse_args(argv)
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        ap.error("give the command to run after --")
    parent = Path(args.out).parent
    try:
        if not parent.is_dir():  # found now, not after minutes of recording
            raise WatchError(f"--out {args.out}: no folder {parent}")
        rc, report = watch(args.pid, cmd)
    except WatchError as err:
        print(f"host_share.py: {err}", file=sys.stderr)
        return 2
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    s = report["share"]
    print(f"host_share.py: {s['engine_cpu_s']:.1f} CPU s in the server's processes, client {s['client_cpu_s']:.1f}, "
          f"other work {s['other_cpu_s']:.1f} over {report['span_s']:.1f} s (host.background "
          f"{report['background']}); {args.out}", file=sys.stderr)
    if report["exited"]:
        print(f"host_share.py: warning: {', '.join(report['exited'])} exited during the command (CPU counted up to "
              "its last 0.2 s sample; a server that lost a process is not the one the scenario describes)",
              file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
