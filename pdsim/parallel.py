"""Run independent jobs serially, on a local process pool, or as Ray tasks, with a progress bar.

One runner for sweeps (explore), experiments and replicas (sim/replicas.py): ``fn(*job[1:])``
for every job, ``on_done(key, row)`` here as each finishes (rows are dicts with a ``status``).
Ctrl-C stops the workers and keeps what finished; a dead worker process is a clear error.
"""
from __future__ import annotations

import os
from typing import Any, Callable

from .specs.errors import SpecError

Job = tuple  # (key, *arguments of fn); sweeps: (key, data, base dir, evaluation, Trust); experiments: (key, data, base dir, Trust)
OnDone = Callable[[Any, dict], None]


def default_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _bar(total: int, progress: bool, desc: str, unit: str = "job"):
    from tqdm import tqdm

    return tqdm(total=total, unit=unit, desc=desc, disable=not progress or total == 0, dynamic_ncols=True,
                smoothing=0.05)


class _Tally:
    def __init__(self, bar):
        self.bar = bar
        self.counts: dict[str, int] = {}

    def __call__(self, row: dict) -> None:
        st = row.get("status", "?")
        self.counts[st] = self.counts.get(st, 0) + 1
        self.bar.set_postfix(self.counts, refresh=False)
        self.bar.update()


PR_SET_PDEATHSIG = 1  # linux/prctl.h
PARENT_POLL_S = 1.0


def _die_with_parent(parent: int) -> None:
    """End this worker when the process that started it dies, however it dies (SIGKILL too).

    A worker re-parented to init would otherwise run on for minutes holding the caller's
    stdout/stderr pipes (a wrapper reading them hangs). Linux: the kernel sends SIGKILL at the
    parent's death (``prctl(PR_SET_PDEATHSIG)``); everywhere: a daemon thread polls the parent id
    once a second and exits when it changes (also covers a parent that died before the prctl)."""
    import signal
    import sys
    import threading
    import time

    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):  # no usable libc: the poll below still ends us
            pass
    if os.getppid() != parent:
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(PARENT_POLL_S)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="pdsim-parent-watch", daemon=True).start()


def _worker_init(parent: int | None = None) -> None:
    """Pool workers leave Ctrl-C to the parent, which stops them and keeps what finished, and
    die with it."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # the CLI turns SIGTERM into an exit (cli._exit_on_sigterm); a forked worker takes the
    # default back, so the pool's own terminate() stops it at once, as before
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if parent is not None:
        _die_with_parent(parent)


def run_local(jobs: list[Job], on_done: OnDone, fn: Callable[..., dict], workers: int | None = None,
              progress: bool = True, desc: str = "jobs", unit: str = "job") -> None:
    """``fn(*job[1:])`` for every job, serially (one worker) or on a process pool (``fn`` must be
    a module-level function); ``on_done(key, row)`` runs here, in finishing order."""
    workers = min(workers or default_workers(), max(len(jobs), 1))
    bar = _bar(len(jobs), progress, desc, unit)
    tally = _Tally(bar)
    try:
        if workers <= 1:
            for key, *args in jobs:
                row = fn(*args)
                on_done(key, row)
                tally(row)
            return
        from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
        from concurrent.futures.process import BrokenProcessPool

        ex = ProcessPoolExecutor(max_workers=workers, initializer=_worker_init, initargs=(os.getpid(),))
        try:
            pending = {ex.submit(fn, *args): key for key, *args in jobs}
            while pending:
                # a timeout keeps the wait interruptible by Ctrl-C
                done, _ = wait(pending, timeout=0.25, return_when=FIRST_COMPLETED)
                for fut in done:
                    key = pending.pop(fut)
                    try:
                        row = fut.result()
                    except BrokenProcessPool:
                        raise SpecError(f"a {desc} worker process died (out of memory?); sweeps and experiments "
                                        f"cache each finished {unit}: rerun to continue", field="--workers") from None
                    on_done(key, row)
                    tally(row)
        except BaseException:  # Ctrl-C or a failure: stop now; what finished is cached
            procs = list(getattr(ex, "_processes", {}).values())
            ex.shutdown(wait=False, cancel_futures=True)
            for proc in procs:
                proc.terminate()
            raise
        ex.shutdown(wait=True)
    finally:
        bar.close()


def run_ray(jobs: list[Job], on_done: OnDone, fn: Callable[..., dict], address: str | None = None,
            workers: int | None = None, progress: bool = True, desc: str = "jobs", unit: str = "job") -> None:
    """The same jobs as Ray tasks (one CPU each); ``on_done`` runs here as each finishes."""
    from .extras import require

    ray = require("ray", "running on Ray", field="--ray-address" if address else "--ray")
    started = False
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
        if address:
            _check_reachable(address)
        try:
            if address:
                ray.init(address=address, **kwargs)
            else:
                ray.init(num_cpus=workers or default_workers(), **kwargs)
        except Exception as err:  # noqa: BLE001 - connection problems are user input problems here
            raise SpecError(f"cannot start or reach Ray: {err}", field="--ray-address" if address else "--ray") from None
        started = True
    bar = _bar(len(jobs), progress, f"{desc} (ray)", unit)
    tally = _Tally(bar)
    pending: dict = {}
    try:
        remote = ray.remote(num_cpus=1, max_retries=1)(fn)
        pending = {remote.remote(*args): key for key, *args in jobs}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1, timeout=0.25)
            for ref in done:
                key = pending.pop(ref)
                try:
                    row = ray.get(ref)
                except ray.exceptions.RayError as err:  # worker lost, pdsim missing on a node...
                    row = {"status": "error", "reason": f"ray: {str(err).strip().splitlines()[-1]}"}
                on_done(key, row)
                tally(row)
    except BaseException:
        for ref in pending:
            ray.cancel(ref, force=True)
        raise
    finally:
        bar.close()
        if started:
            ray.shutdown()


def _check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Fail fast on a ``host:port`` nobody listens on (Ray itself retries for a minute)."""
    import socket

    hostport = address.split("://", 1)[-1]
    if address == "auto" or ":" not in hostport:
        return
    host, _, port = hostport.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
    except (OSError, ValueError) as err:
        raise SpecError(f"cannot reach a Ray cluster at {address}: {err}", field="--ray-address") from None


def run_jobs(jobs: list[Job], on_done: OnDone, fn: Callable[..., dict], workers: int | None = None,
             ray: bool = False, ray_address: str | None = None, progress: bool = True, desc: str = "jobs",
             unit: str = "job") -> None:
    """``fn(*job[1:])`` for every job on Ray (``ray``/``ray_address``) or locally."""
    if ray or ray_address:
        run_ray(jobs, on_done, fn, ray_address, workers, progress, desc, unit)
    else:
        run_local(jobs, on_done, fn, workers, progress, desc, unit)
