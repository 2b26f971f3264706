"""Background simulation jobs for the dashboard: start, poll progress, cancel.

Each run is a child process (``forkserver`` on Linux, with pdsim preloaded once, so a start
costs milliseconds; ``spawn`` elsewhere), so the web server stays responsive, several runs use
several cores, and Cancel terminates the run at once. The child sends progress ticks
(``pdsim.simulate``'s progress callback) and, at the end, a :class:`RunSnapshot` through a pipe;
a watcher thread in the server receives them. Finished results stay in memory, keyed by job
id; the oldest beyond ``keep`` are dropped.
"""
from __future__ import annotations

import multiprocessing as mp
import sys
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field

import pdsim
from pdsim.metrics.results import Results


class RunSnapshot(Results):
    """A finished run's tables and summary, detached from the simulation world (whose SimPy
    processes cannot be pickled) so it can leave the worker process. The shared figure
    builders accept it wherever they accept Results."""

    def __init__(self, res: Results):  # noqa: D107 - deliberately not calling Results.__init__
        self.scenario = res.scenario
        self.record = res.record
        self._summary = res.summary()
        self._requests = res.requests
        self._timeline = res.timeline
        self._itls = res.itls

    requests = property(lambda self: self._requests)  # type: ignore[assignment]
    timeline = property(lambda self: self._timeline)  # type: ignore[assignment]
    itls = property(lambda self: self._itls)  # type: ignore[assignment]
    gpus = property(lambda self: self._summary["gpus"])  # type: ignore[assignment]
    nodes = property(lambda self: self._summary["nodes"])  # type: ignore[assignment]

    def summary(self) -> dict:
        import copy

        return copy.deepcopy(self._summary)


def _worker(resolved, conn) -> None:  # runs in the child process
    last = [0.0]

    def progress(sim_now, wall, done, total):
        now = time.perf_counter()
        if now - last[0] >= 0.1:  # at most 10 ticks/s through the pipe
            last[0] = now
            conn.send(("progress", float(sim_now), float(wall), int(done), int(total)))

    try:
        res = pdsim.simulate(resolved, progress=progress)
        conn.send(("done", RunSnapshot(res)))
    except pdsim.SpecError as err:
        conn.send(("failed", str(err)))
    except BaseException as err:  # noqa: BLE001 - reported to the page, never a crash of the app
        conn.send(("failed", f"{type(err).__name__}: {err}"))
    finally:
        conn.close()


def _context():
    if sys.platform.startswith("linux"):
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(["pdsim", "pdsim.dashboards.jobs"])
        return ctx
    return mp.get_context("spawn")


@dataclass
class Job:
    jid: str
    name: str
    label: str
    status: str = "starting"  # starting | running | done | failed | cancelled
    done: int = 0
    total: int = 0
    sim_s: float = 0.0
    wall_s: float = 0.0
    started: float = field(default_factory=time.perf_counter)
    error: str | None = None
    result: RunSnapshot | None = None

    @property
    def active(self) -> bool:
        return self.status in ("starting", "running")


class JobManager:
    def __init__(self, keep: int = 16, max_running: int = 4):
        self._ctx = _context()
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        self._procs: dict[str, mp.Process] = {}
        self._lock = threading.Lock()
        self.keep, self.max_running = keep, max_running

    def start(self, resolved, label: str | None = None) -> str:
        job = Job(uuid.uuid4().hex[:10], resolved.name, label or resolved.name)
        with self._lock:
            if sum(j.active for j in self._jobs.values()) >= self.max_running:
                job.status, job.error = "failed", f"{self.max_running} runs are in progress; cancel one first"
                self._jobs[job.jid] = job
                return job.jid
            self._jobs[job.jid] = job
            self._evict()
        recv, send = self._ctx.Pipe(duplex=False)
        proc = self._ctx.Process(target=_worker, args=(resolved, send), daemon=True, name=f"pdsim-run-{job.jid}")
        try:
            proc.start()
        except Exception as err:  # noqa: BLE001
            job.status, job.error = "failed", f"could not start the run: {err}"
            return job.jid
        send.close()  # the child holds its end; EOF here once it exits
        self._procs[job.jid] = proc
        job.status = "running"
        threading.Thread(target=self._watch, args=(job, proc, recv), daemon=True).start()
        return job.jid

    def _watch(self, job: Job, proc, conn) -> None:
        try:
            while True:
                try:
                    msg = conn.recv()
                except (EOFError, OSError):
                    break
                if msg[0] == "progress":
                    _, job.sim_s, job.wall_s, job.done, job.total = msg
                elif msg[0] == "done":
                    job.result = msg[1]
                    job.done = job.total = len(job.result.requests)
                    job.status = "done"
                elif msg[0] == "failed":
                    job.status, job.error = "failed", msg[1]
        finally:
            conn.close()
            proc.join(timeout=5)
            job.wall_s = time.perf_counter() - job.started
            if job.status == "running":
                job.status = "failed"
                job.error = f"the run's process ended unexpectedly (exit code {proc.exitcode})"
            self._procs.pop(job.jid, None)

    def warm_up(self) -> None:
        """Start the fork server (and its pdsim import) now rather than at the first Run."""
        if self._ctx.get_start_method() == "forkserver":
            from multiprocessing import forkserver

            threading.Thread(target=forkserver.ensure_running, daemon=True).start()

    def get(self, jid: str | None) -> Job | None:
        with self._lock:
            return self._jobs.get(jid) if jid else None

    def cancel(self, jid: str | None) -> bool:
        job = self.get(jid)
        proc = self._procs.get(jid) if jid else None
        if job is None or not job.active:
            return False
        job.status = "cancelled"
        if proc is not None and proc.is_alive():
            proc.terminate()
        return True

    def _evict(self) -> None:
        finished = [j for j in self._jobs.values() if not j.active]
        for j in finished[: max(0, len(finished) - self.keep)]:
            self._jobs.pop(j.jid, None)

    def shutdown(self) -> None:
        for jid in list(self._procs):
            self.cancel(jid)
