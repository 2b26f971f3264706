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

from ..parallel import Job, OnDone, default_workers, run_jobs as _run_jobs
from ..specs.errors import SpecError
from .search import evaluate

CACHE_FORMAT = 1



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


def run_jobs(jobs: list[Job], on_done: OnDone, workers: int | None = None, ray: bool = False,
             ray_address: str | None = None, progress: bool = True, fn: Callable[..., dict] = evaluate,
             desc: str = "sweep", unit: str = "config") -> None:
    """pdsim.parallel.run_jobs with a sweep's evaluation as the default function."""
    _run_jobs(jobs, on_done, fn, workers, ray, ray_address, progress, desc, unit)


__all__ = ["Cache", "default_workers", "run_jobs"]
