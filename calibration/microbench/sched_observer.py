"""What the kernel's scheduler did on one core while a deployment ran: each scheduling group's
weight, runnable count and lag there, which task ran, and one process's share of the core.

Issue 24's open question: on the Intel host with autogroup on, vLLM 1P1D's P prefills ran 4-5x
their price while D stepped, where every fair-share price (equal, or the group weights of
``pdsim/costs/group_share.py``, measured within 4% in isolation by ``group_share.py``) gives at most
~2x. This records the kernel's own view (``/sys/kernel/debug/sched/debug``, debugfs) of ``--core``
every ``--period`` seconds from a process pinned to another core at real-time priority (SCHED_FIFO
20: an observer sharing the watched core, or starved with it, misses exactly the moments that
matter), and the autogroup of each process whose command line matches ``--match``.

    sudo python calibration/microbench/sched_observer.py record --out rec.json.gz [--core 0] \\
        [--observer-core 1] [--period 0.01] [--match vllm --match pd_proxy --match run_case]
    (run the deployment; SIGINT / SIGTERM stops it and writes the recording)
    python calibration/microbench/sched_observer.py analyse rec.json.gz --trace STEP_TRACES [--json out.json]

``analyse`` takes the windows from a 1P1D step-trace folder (``run_case.py --trace-steps``: P's
``execute_model`` calls, P's worker = the later pid of ``p.<pid>``) and labels the autogroups P, D,
proxy and client. Per pair of snapshots inside a window: the worker's CPU over the wall time
(its ``sum-exec``), and, where it got under 0.2 of the core (starved) or 0.6 and more (fine), which
task was running and each group's weight (of a nice-0 group's 1,024), runnable tasks and lag (the
root's ``avg_vruntime`` minus the group entity's ``vruntime``, ms: negative = not eligible under
EEVDF). Needs root (debugfs, SCHED_FIFO); refused in one line otherwise (exit 2).
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import signal
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

DEBUG = Path("/sys/kernel/debug/sched/debug")
NICE0 = 1024 * 1024  # a nice-0 entity's load.weight on a 64-bit kernel (scale_load(1024))
_BLOCK = re.compile(r"cfs_rq\[(\d+)\]:(\S+)\n(.*?)(?=\n\n|\Z)", re.S)
_FIELD = re.compile(r"\.(\S+)\s+:\s+(-?[\d.]+)")
_TASK = re.compile(r"^\s*(>?[A-Z])\s+(.{1,16}?)\s+(\d+)\s+(-?[\d.]+)\s+([EN])\s+(-?[\d.]+)\s+([\d.]+)\s+([\d.]+)\s+"
                   r"\d+\s+\d+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+\d+\s+\d+\s+(\S+)\s*$", re.M)


def core_section(text: str, cpu: int) -> str:
    """The part of a sched debug dump about ``cpu`` (its header, cfs_rqs and tasks)."""
    start = text.find(f"\ncpu#{cpu},")
    if start < 0:
        raise ValueError(f"no cpu#{cpu} in the sched debug dump")
    end = text.find("\ncpu#", start + 1)
    return text[start:end if end > 0 else len(text)]


def parse_core(text: str, cpu: int) -> dict:
    """One core's state from a sched debug dump: ``curr`` (the running task's pid), ``avg_vruntime``
    of its root cfs_rq (ms), ``groups`` {path: {weight (of a nice-0 group), runnable, vruntime}}
    and ``tasks`` {pid: (state, name, sum_exec ms, eligible, group path)}."""
    sec = core_section(text, cpu)
    cur = re.search(r"\.curr->pid\s+:\s+(\d+)", sec)
    out: dict = {"curr": int(cur.group(1)) if cur else -1, "avg_vruntime": None, "groups": {}, "tasks": {}}
    for m in _BLOCK.finditer(sec):
        if int(m.group(1)) != cpu:
            continue
        f = dict(_FIELD.findall(m.group(3)))
        if m.group(2) == "/":
            out["avg_vruntime"] = float(f["avg_vruntime"])
        elif "se->load.weight" in f:
            out["groups"][m.group(2)] = {"weight": float(f["se->load.weight"]) / NICE0,
                                         "runnable": float(f.get("h_nr_runnable", 0)),
                                         "vruntime": float(f["se->vruntime"])}
    for m in _TASK.finditer(sec[sec.find("runnable tasks:"):]):
        out["tasks"][int(m.group(3))] = (m.group(1), m.group(2).strip(), float(m.group(8)), m.group(5) == "E",
                                         m.group(9))
    return out


def _refusal() -> str | None:
    if not os.access(DEBUG, os.R_OK):
        return f"cannot read {DEBUG}: needs root and debugfs (mount -t debugfs none /sys/kernel/debug)"
    return None


def record(out: str, core: int, observer_core: int, period_s: float, match: list[str]) -> int:
    """Snapshots until SIGINT / SIGTERM, then writes them (raw) and the processes' autogroups."""
    os.sched_setaffinity(0, {observer_core})
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(20))
    stop = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.append(1))
    snaps, groups, seen = [], {}, 0.0
    while not stop:
        t = time.monotonic()
        snaps.append((t, DEBUG.read_text()))
        if t - seen > 1.0:  # new processes: their autogroup (their session's) and command line
            seen = t
            for d in os.listdir("/proc"):
                if d.isdigit() and int(d) not in groups and int(d) != os.getpid():
                    try:
                        cmd = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                        if any(p in cmd for p in match):
                            groups[int(d)] = (Path(f"/proc/{d}/autogroup").read_text().split()[0], cmd[:300])
                    except OSError:
                        continue
        time.sleep(max(0.0, period_s - (time.monotonic() - t)))
    with gzip.open(out, "wt") as fh:
        json.dump({"core": core, "observer_core": observer_core, "period_s": period_s, "kernel": os.uname().release,
                   "groups": {str(k): v for k, v in groups.items()}, "snaps": snaps}, fh)
    return len(snaps)


def labels(groups: dict[int, tuple[str, str]], trace: Path) -> dict[str, str]:
    """Autogroup path -> P / D (the servers whose step traces are p.<pid> / d.<pid>), proxy, client."""
    out = {}
    for f in trace.iterdir():
        if f.name[:2] in ("p.", "d.") and f.name[2:].isdigit() and int(f.name[2:]) in groups:
            out[groups[int(f.name[2:])][0]] = f.name[0].upper()
    for ag, cmd in groups.values():
        if "pd_proxy" in cmd:
            out.setdefault(ag, "proxy")
        elif "run_case" in cmd:
            out.setdefault(ag, "client")
    return out


def share_report(states: list[tuple[float, dict]], windows: list[tuple[float, float]], pid: int,
                 label_of: dict[str, str], pid_label: dict[int, str]) -> dict:
    """``pid``'s share of the core between consecutive snapshots inside ``windows``, and the core's
    state where it starved (< 0.2) and where it did fine (>= 0.6)."""
    pairs = []
    for (ta, a), (tb, b) in zip(states, states[1:]):
        if pid in a["tasks"] and pid in b["tasks"] and any(w0 <= ta and tb <= w1 for w0, w1 in windows):
            pairs.append(((b["tasks"][pid][2] - a["tasks"][pid][2]) / ((tb - ta) * 1e3), b))
    if not pairs:
        raise ValueError(f"no two snapshots of pid {pid} inside the windows")
    x = np.array([s for s, _ in pairs])

    def state(sel: list[dict]) -> dict:
        if not sel:
            return {"n": 0}
        ran = Counter(f"{pid_label.get(s['curr'], 'other')}:{s['tasks'].get(s['curr'], ('', '?'))[1]}" for s in sel)
        g: dict[str, list] = {}
        for s in sel:
            for path, v in s["groups"].items():
                if path in label_of:
                    g.setdefault(label_of[path], []).append(
                        (v["weight"], v["runnable"], s["avg_vruntime"] - v["vruntime"]))
        return {"n": len(sel), "running": {k: round(v / len(sel), 3) for k, v in ran.most_common(6)},
                "groups": {k: dict(zip(("weight", "runnable", "lag_ms"), np.round(np.mean(v, 0), 2).tolist()))
                           for k, v in sorted(g.items())}}

    return {"pairs": len(x), "share_mean": round(float(x.mean()), 3),
            "share_quantiles": dict(zip(("p10", "p25", "p50", "p75", "p90"),
                                        np.round(np.quantile(x, [0.1, 0.25, 0.5, 0.75, 0.9]), 3).tolist())),
            "starved_fraction": round(float((x < 0.2).mean()), 3),
            "starved": state([b for s, b in pairs if s < 0.2]), "fine": state([b for s, b in pairs if s >= 0.6])}


def analyse(rec_path: str, trace: Path) -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from vllm_step_trace import read_trace

    rec = json.loads(gzip.open(rec_path, "rt").read())
    groups = {int(k): tuple(v) for k, v in rec["groups"].items()}
    label_of = labels(groups, trace)
    pid_label = {pid: label_of.get(ag, "other") for pid, (ag, _cmd) in groups.items()}
    p_pids = sorted(int(f.name[2:]) for f in trace.iterdir() if f.name[:2] == "p." and f.name[2:].isdigit())
    if not p_pids:
        raise ValueError(f"{trace}: no P step trace (p.<pid>)")
    _, calls = read_trace(trace / "p")
    windows = [(c["t0"], c["t1"]) for c in calls if c["call"] == "execute_model"]
    core = rec.get("core", 0)
    states = [(t, parse_core(s, core)) for t, s in rec["snaps"]]
    out = share_report(states, windows, p_pids[-1], label_of, pid_label)
    out.update(core=core, period_s=rec.get("period_s"), kernel=rec.get("kernel"), snapshots=len(states),
               labels=label_of)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("--out", required=True)
    r.add_argument("--core", type=int, default=0, help="the core to watch (default 0)")
    r.add_argument("--observer-core", type=int, default=1, help="where the observer runs (default 1)")
    r.add_argument("--period", type=float, default=0.01, help="seconds between snapshots (default 0.01)")
    r.add_argument("--match", action="append", default=None, help="command-line substrings of the processes "
                                                                     "to label (default vllm, pd_proxy, run_case)")
    a_ = sub.add_parser("analyse")
    a_.add_argument("recording")
    a_.add_argument("--trace", required=True, help="the run's step traces (run_case.py --trace-steps DIR)")
    a_.add_argument("--json", help="write the report here too")
    a = ap.parse_args(argv)
    if a.cmd == "record":
        allowed = os.sched_getaffinity(0)
        for name, c in (("--core", a.core), ("--observer-core", a.observer_core)):
            if c not in allowed:
                ap.error(f"{name} {c}: not a core this process may use ({sorted(allowed)})")
        if a.core == a.observer_core:
            ap.error("--observer-core must differ from --core: an observer on the watched core changes it")
        if not 0.001 <= a.period <= 10:
            ap.error(f"--period: expected 0.001-10 s, got {a.period}")
        if refusal := _refusal():
            ap.error(refusal)
        try:
            n = record(a.out, a.core, a.observer_core, a.period, a.match or ["vllm", "pd_proxy", "run_case"])
        except PermissionError:
            ap.error("SCHED_FIFO refused: run as root (the observer must not be starved with the watched core)")
        print(f"{n} snapshots -> {a.out}")
        return 0
    try:
        rep = analyse(a.recording, Path(a.trace))
    except (OSError, ValueError, KeyError) as e:
        ap.error(f"{a.recording}: {e}")
    print(json.dumps(rep, indent=1))
    if a.json:
        Path(a.json).write_text(json.dumps(rep, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
