"""Run configurations: serially, on a local process pool, or as Ray tasks; cache each result.

Every configuration is evaluated by the same top-level function (``search.evaluate``) from its
scenario data alone, and rows are assembled in plan order, so a sweep's rows do not depend on
the worker count or on where it ran. Each finished configuration is written at once to
``DIR/cache/<key>.json`` atomically (written to a temporary file in the same folder, flushed,
then renamed over the target: a killed run leaves either the old file or the new one), ``key``
being a stable hash of what the row depends on (fingerprint.py: scenario data, the bytes of the
hardware profile with its calibration, model, storage catalogue and trace, pdsim's version and
simulation code, how it is evaluated). A rerun reads those files and computes only what is
missing; an unreadable or torn file is reported (``Cache.problems``) and recomputed, never
fatal; editing a profile, ``calibrate fit`` or an upgrade invalidates exactly the entries it
could change.

Ray: ``ray=True`` starts a local Ray instance (or uses the one already initialised in this
process); ``address`` connects to a cluster (``ray://host:10001`` or ``host:6379``). Every Ray
node needs the same pdsim installed, and file paths a scenario names (traces, profiles outside
the package) must exist there too (a shared filesystem or the same checkout path).
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

from ..specs.errors import SpecError
from .search import evaluate

CACHE_FORMAT = 1

Job = tuple  # (cache key, *arguments of the evaluation function); sweeps: (key, data, base dir, evaluation, Trust)
OnDone = Callable[[str, dict], None]


def default_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


class Cache:
    """``DIR/cache/<key>.json``: one finished configuration each."""

    def __init__(self, out: Path):
        self.dir = Path(out) / "cache"
        if self.dir.exists() and not self.dir.is_dir():
            raise SpecError(f"{self.dir} is a file; the sweep keeps its cache in that folder", field="--out")
        self.dir.mkdir(parents=True, exist_ok=True)
        self.problems: list[str] = []  # unreadable entries (recomputed) and failed writes (not cached)
        for stale in self.dir.glob(".*.tmp"):  # left by a run killed mid-write
            stale.unlink(missing_ok=True)

    def path(self, key: str) -> Path:
        return self.dir / f"{key}.json"

    def get(self, key: str) -> dict | None:
        p = self.path(key)
        try:
            text = p.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as err:
            return self._bad(p, f"unreadable ({getattr(err, 'strerror', None) or err})")
        try:
            rec = json.loads(text)
        except (ValueError, RecursionError) as err:
            return self._bad(p, f"not valid JSON ({str(err)[:80]}); a write was cut short?")
        if not isinstance(rec, dict) or rec.get("key") != key or not isinstance(rec.get("row"), dict):
            return self._bad(p, "not a cache entry of this configuration")
        if rec.get("format") != CACHE_FORMAT:
            return None  # written by another pdsim version: silently recomputed
        return rec["row"]

    def _bad(self, p: Path, why: str) -> None:
        self.problems.append(f"sweep cache {p}: {why}; recomputing that configuration")
        return None

    def put(self, key: str, row: dict, config_id: str | None = None) -> None:
        rec = {"format": CACHE_FORMAT, "key": key, "config_id": config_id, "row": row}
        try:
            fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=f".{key}.", suffix=".tmp")
        except OSError as err:
            self.problems.append(f"sweep cache {self.dir}: cannot write ({err.strerror or err}); "
                                 "that configuration is not cached")
            return
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(rec, f, default=_jsonable)
                f.flush()
                os.fsync(f.fileno())  # the bytes are on disk before the name points at them
            os.replace(tmp, self.path(key))
        except OSError as err:  # disk full, a folder where the file should be: the row is kept, uncached
            Path(tmp).unlink(missing_ok=True)
            self.problems.append(f"sweep cache {self.path(key)}: cannot write ({err.strerror or err}); "
                                 "that configuration is not cached")
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def keys(self) -> set[str]:
        return {p.stem for p in self.dir.glob("*.json")}


def _jsonable(x: Any) -> Any:
    if hasattr(x, "item"):
        return x.item()
    return str(x)


def _bar(total: int, progress: bool, desc: str, unit: str = "config"):
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


def _worker_init() -> None:
    """Pool workers leave Ctrl-C to the parent, which stops them and keeps what finished."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def run_local(jobs: list[Job], on_done: OnDone, workers: int | None = None, progress: bool = True,
              fn: Callable[..., dict] = evaluate, desc: str = "sweep", unit: str = "config") -> None:
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

        ex = ProcessPoolExecutor(max_workers=workers, initializer=_worker_init)
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
                        raise SpecError(f"a {desc} worker process died (out of memory?); finished {unit}s "
                                        "are cached, rerun to continue", field="--workers") from None
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


def run_ray(jobs: list[Job], on_done: OnDone, address: str | None = None, workers: int | None = None,
            progress: bool = True, fn: Callable[..., dict] = evaluate, desc: str = "sweep",
            unit: str = "config") -> None:
    """The same jobs as Ray tasks (one CPU each); ``on_done`` runs here as each finishes."""
    try:
        import ray
    except ImportError:
        raise SpecError("Ray is not installed: pip install 'pdsim[ray]' (or \"ray[default]\")",
                        field="--ray-address" if address else "--ray") from None
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


def run_jobs(jobs: list[Job], on_done: OnDone, workers: int | None = None, ray: bool = False,
             ray_address: str | None = None, progress: bool = True, fn: Callable[..., dict] = evaluate,
             desc: str = "sweep", unit: str = "config") -> None:
    """``fn(*job[1:])`` for every job on Ray (``ray``/``ray_address``) or locally."""
    if ray or ray_address:
        run_ray(jobs, on_done, ray_address, workers, progress, fn, desc, unit)
    else:
        run_local(jobs, on_done, workers, progress, fn, desc, unit)
