"""Background simulation jobs for the dashboard: start, poll progress, cancel.

A job runs ``pdsim.simulate`` in a worker thread; the progress callback records simulated time
and raises ``Cancelled`` once the user has asked to stop, which unwinds the simulation at its
next progress tick (a few dozen ticks per run). Results stay in memory, keyed by job id.
"""
from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pdsim


class Cancelled(Exception):
    pass


@dataclass
class Job:
    jid: str
    name: str
    status: str = "running"  # running | done | failed | cancelled
    done: int = 0
    total: int = 0
    sim_s: float = 0.0
    wall_s: float = 0.0
    error: str | None = None
    result: object | None = None
    cancel: threading.Event = field(default_factory=threading.Event)


class JobManager:
    def __init__(self, workers: int = 2):
        self._pool = ThreadPoolExecutor(max_workers=workers)
        self._jobs: dict[str, Job] = {}
        self._lock = threading.Lock()

    def start(self, resolved) -> str:
        job = Job(uuid.uuid4().hex[:10], resolved.name)
        with self._lock:
            self._jobs[job.jid] = job

        def progress(sim_now, wall, done, total):
            job.sim_s, job.wall_s, job.done, job.total = sim_now, wall, done, total
            if job.cancel.is_set():
                raise Cancelled()

        def run():
            t0 = time.perf_counter()
            try:
                job.result = pdsim.simulate(resolved, progress=progress)
                job.status = "done"
            except Cancelled:
                job.status = "cancelled"
            except pdsim.SpecError as err:
                job.status, job.error = "failed", str(err)
            except Exception as err:  # noqa: BLE001 - shown to the user, never a crash of the app
                job.status, job.error = "failed", f"{type(err).__name__}: {err}"
            job.wall_s = time.perf_counter() - t0

        self._pool.submit(run)
        return job.jid

    def get(self, jid: str | None) -> Job | None:
        with self._lock:
            return self._jobs.get(jid) if jid else None

    def cancel(self, jid: str | None) -> None:
        job = self.get(jid)
        if job is not None:
            job.cancel.set()
