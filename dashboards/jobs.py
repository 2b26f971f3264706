"""Background simulation jobs for the dashboard: start, poll progress, cancel, per session.

Each run is a child process (``forkserver`` on Linux, with pdsim preloaded once, so a start
costs milliseconds; ``spawn`` elsewhere), so the web server stays responsive, several runs use
several cores, and Cancel terminates the run at once. The child sends progress ticks
(``pdsim.simulate``'s progress callback) and, at the end, the run's ``Results`` (a RunRecord of
plain arrays, cheap to pickle) through a pipe; a watcher thread in the server receives them.

Every job belongs to a browser session (sessions.py) and is found only with that session's
id. Bounds (config.Limits): ``running_per_session`` runs in progress per session (so one session
never holds every slot) and ``running_total`` on the server; each run is stopped after
``run_wall_s`` seconds, so no scenario (say a fault model that never lets the clock end) holds a
slot for longer; ``runs_per_session`` finished runs per session, ``runs_total`` and
``kept_requests_total`` requests on the server, the least recently viewed dropped first.
"""
from __future__ import annotations

import multiprocessing as mp
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable

import pdsim
from pdsim.metrics.results import Results
from pdsim.specs.errors import SpecError

from .config import Limits


def _worker(resolved, conn) -> None:  # runs in the child process
    last = [0.0]

    def progress(sim_now, wall, done, total):
        now = time.perf_counter()
        if now - last[0] >= 0.1:  # at most 10 ticks/s through the pipe
            last[0] = now
            conn.send(("progress", float(sim_now), float(wall), int(done), int(total)))

    try:
        res = pdsim.simulate(resolved, progress=progress)
        conn.send(("done", res))
    except pdsim.SpecError as err:
        conn.send(("failed", str(err)))
    except BaseException as err:  # noqa: BLE001 - reported to the page, never a crash of the app
        conn.send(("failed", f"{type(err).__name__}: {err}"))
    finally:
        conn.close()


def _context():
    if sys.platform.startswith("linux"):
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(["pdsim", "pdsim.api", "pdsim.dashboards.jobs"])
        return ctx
    return mp.get_context("spawn")


def cancel_job(job, procs: dict) -> bool:
    """Mark an active job cancelled and stop its child process (if still running); False if
    there is no such active job. Shared by run and sweep jobs (sweep_jobs.py)."""
    if job is None or not job.active:
        return False
    job.status = "cancelled"
    proc = procs.get(job.jid)
    if proc is not None and proc.is_alive():
        proc.terminate()
    return True


@dataclass
class Job:
    jid: str
    sid: str  # the browser session that owns it
    name: str
    label: str
    files: tuple[str, ...] = ()  # files the run reads (uploads are kept while it runs)
    status: str = "starting"  # starting | running | done | failed | cancelled
    done: int = 0
    total: int = 0
    sim_s: float = 0.0
    wall_s: float = 0.0
    started: float = field(default_factory=time.perf_counter)
    used: float = field(default_factory=time.monotonic)  # last start, end or view, for eviction
    error: str | None = None
    result: Results | None = None

    @property
    def active(self) -> bool:
        return self.status in ("starting", "running")


def _files_of(resolved) -> tuple[str, ...]:
    trace = resolved.scenario.workload.trace
    if trace is None:
        return ()
    from pathlib import Path

    p = Path(trace.path)
    return (str((resolved.base_dir / p) if not p.is_absolute() else p),)


def _kept_requests(job: Job) -> int:
    return len(job.result.record) if job.result is not None else 0


class JobManager:
    def __init__(self, limits: Limits | None = None):
        self.limits = limits or Limits()
        self._ctx = _context()
        self._jobs: dict[str, Job] = {}
        self._procs: dict[str, mp.Process] = {}
        self._numbers: dict[str, int] = {}  # session -> runs started (the #n of labels)
        self.admit: Callable[[str], object] = lambda sid: sid  # sessions.admit, set by services.py
        self._lock = threading.Lock()

    # ---- starting ------------------------------------------------------------------------
    def start(self, sid: str, resolved, label: str | None = None) -> Job:
        """Start a run for session ``sid``; SpecError when a bound refuses it. ``label`` may use
        ``{n}``, the session's run number."""
        self.admit(sid)
        with self._lock:
            mine = [j for j in self._jobs.values() if j.sid == sid and j.active]
            if len(mine) >= self.limits.running_per_session:
                what = f"run {mine[0].label} is" if len(mine) == 1 else f"{len(mine)} runs of this page are"
                raise SpecError(f"{what} still in progress: wait for it or cancel it", source="run")
            running = sum(j.active for j in self._jobs.values())
            if running >= self.limits.running_total:
                raise SpecError(f"the server is running {running} simulations, its limit; try again when one "
                                "ends", source="run")
            n = self._numbers.get(sid, 0) + 1
            self._numbers[sid] = n
            job = Job(uuid.uuid4().hex, sid, resolved.name, (label or "#{n} " + resolved.name).replace("{n}", str(n)),
                      _files_of(resolved))
            self._jobs[job.jid] = job
        recv, send = self._ctx.Pipe(duplex=False)
        proc = self._ctx.Process(target=_worker, args=(resolved, send), daemon=True, name=f"pdsim-run-{job.jid[:8]}")
        try:
            proc.start()
        except Exception as err:  # noqa: BLE001
            job.status, job.error = "failed", f"could not start the run: {type(err).__name__}: {err}"
            send.close()
            recv.close()
            return job
        send.close()  # the child holds its end; EOF here once it exits
        with self._lock:
            self._procs[job.jid] = proc
            if job.status == "starting":
                job.status = "running"
        threading.Thread(target=self._watch, args=(job, proc, recv), daemon=True).start()
        return job

    def _watch(self, job: Job, proc, conn) -> None:
        deadline = time.perf_counter() + self.limits.run_wall_s  # from the process's start
        try:
            while True:
                try:
                    if not conn.poll(max(0.0, min(1.0, deadline - time.perf_counter()))):
                        if time.perf_counter() < deadline:
                            continue
                        if job.status == "running":
                            where = (f"{job.done:,}/{job.total:,} requests done, simulated {job.sim_s:,.1f} s"
                                     if job.total else "no progress reported")
                            job.status = "failed"
                            job.error = (f"stopped after {self.limits.run_wall_s:g} s, the time limit of a dashboard "
                                         f"run ({where}); run fewer requests, or run it with `pdsim run`")
                        proc.terminate()
                        break
                    msg = conn.recv()
                except (EOFError, OSError):
                    break
                except Exception as err:  # noqa: BLE001 - an unpicklable result: a failed run, not a dead thread
                    job.error = f"could not receive the result: {type(err).__name__}: {err}"
                    break
                if msg[0] == "progress":
                    _, job.sim_s, job.wall_s, job.done, job.total = msg
                elif msg[0] == "done":
                    job.result = msg[1]
                    job.done = job.total = len(job.result.record)
                    job.status = "done"
                elif msg[0] == "failed":
                    job.status, job.error = "failed", msg[1]
        finally:
            conn.close()
            proc.join(timeout=5)
            job.wall_s = time.perf_counter() - job.started
            if job.status == "running":
                job.status = "failed"
                job.error = job.error or f"the run's process ended unexpectedly (exit code {proc.exitcode})"
            with self._lock:
                self._procs.pop(job.jid, None)
                job.used = time.monotonic()  # just ended: the last result to drop
                self._evict()

    def warm_up(self) -> None:
        """Start the fork server (and its pdsim import) now rather than at the first Run."""
        if self._ctx.get_start_method() == "forkserver":
            from multiprocessing import forkserver

            threading.Thread(target=forkserver.ensure_running, daemon=True).start()

    # ---- reading ---------------------------------------------------------------------------
    def get(self, sid: str | None, jid: str | None) -> Job | None:
        """Session ``sid``'s job ``jid`` (None for another session's job or a dropped one)."""
        with self._lock:
            job = self._jobs.get(jid) if isinstance(jid, str) else None
            if job is None or job.sid != sid:
                return None
            job.used = time.monotonic()
            return job

    def runs(self, sid: str | None) -> list[Job]:
        """Session ``sid``'s finished runs with results, oldest first."""
        with self._lock:
            return [j for j in self._jobs.values() if j.sid == sid and j.result is not None]

    def active(self, sid: str | None) -> Job | None:
        """Session ``sid``'s run in progress, if any."""
        with self._lock:
            return next((j for j in self._jobs.values() if j.sid == sid and j.active), None)

    def in_use(self, path: str) -> bool:
        """Whether a run in progress reads ``path``."""
        with self._lock:
            return any(j.active and path in j.files for j in self._jobs.values())

    def holds(self, sid: str) -> bool:
        """Whether session ``sid`` has a run, in progress or kept."""
        with self._lock:
            return any(j.sid == sid for j in self._jobs.values())

    def running(self, sid: str) -> bool:
        """Whether session ``sid`` has a run in progress."""
        with self._lock:
            return any(j.sid == sid and j.active for j in self._jobs.values())

    def active_count(self) -> int:
        with self._lock:
            return sum(j.active for j in self._jobs.values())

    # ---- stopping and forgetting -------------------------------------------------------------
    def cancel(self, sid: str | None, jid: str | None) -> bool:
        return cancel_job(self.get(sid, jid), self._procs)

    def drop_session(self, sid: str) -> None:
        """Cancel the session's run and forget its results (the session was forgotten)."""
        with self._lock:
            jobs = [j for j in self._jobs.values() if j.sid == sid]
            self._numbers.pop(sid, None)
        for j in jobs:
            self.cancel(sid, j.jid)
        with self._lock:
            for j in jobs:
                self._jobs.pop(j.jid, None)

    def _evict(self) -> None:
        """Drop finished jobs beyond the per-session and server bounds (count, and requests
        kept), least recently used first; failed and cancelled ones go before runs with results.
        A session's latest job stays (its page may not have polled its end yet). Caller holds
        the lock."""
        latest: dict[str, Job] = {}
        for j in self._jobs.values():
            if j.sid not in latest or j.started > latest[j.sid].started:
                latest[j.sid] = j
        finished = sorted((j for j in self._jobs.values() if not j.active and latest[j.sid] is not j),
                          key=lambda j: (j.result is not None, j.used))
        per: dict[str, int] = {}
        for j in self._jobs.values():
            if not j.active:
                per[j.sid] = per.get(j.sid, 0) + 1
        total = sum(per.values())
        requests = sum(_kept_requests(j) for j in self._jobs.values())
        for j in finished:
            over_session = per[j.sid] > self.limits.runs_per_session
            if over_session or total > self.limits.runs_total or requests > self.limits.kept_requests_total:
                self._jobs.pop(j.jid, None)
                per[j.sid] -= 1
                total -= 1
                requests -= _kept_requests(j)
        # memory is the bound that matters: past it, even a session's latest run loses its tables
        # (the job stays, so its page still reads how it ended)
        for j in sorted((j for j in self._jobs.values() if j.result is not None), key=lambda j: j.used):
            if requests <= self.limits.kept_requests_total:
                break
            requests -= _kept_requests(j)
            j.result = None
            j.error = (f"its results were dropped: the server keeps results of at most "
                       f"{self.limits.kept_requests_total:,} requests in all")

    def shutdown(self) -> None:
        for job in list(self._jobs.values()):
            self.cancel(job.sid, job.jid)
