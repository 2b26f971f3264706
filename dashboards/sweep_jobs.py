"""Sweeps started from the dashboard: the scenario in the editor as the base, one or two axes
picked on the Explore tab, run by ``pdsim.explore.run_sweep`` in a child process with its
progress sent back through a pipe (as jobs.py does for single runs).

Bounds: at most ``MAX_CONFIGS`` configurations per sweep, one sweep in progress per browser
session and ``MAX_RUNNING`` on the server, a wall-time limit (``WALL_LIMIT_S``) after which the
child is terminated, and at most ``MAX_FOLDERS`` sweep folders kept under the data folder's
``dashboard-sweeps/`` (the oldest the dashboard wrote are deleted). Each result folder is the
same as ``pdsim sweep --out`` writes, so the Explore tab lists and opens it like any other.
"""
from __future__ import annotations

import multiprocessing as mp
import re
import shutil
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from pdsim.specs.errors import SpecError

from .jobs import cancel_job

MAX_CONFIGS = 16  # configurations one sweep from the page may plan
MAX_AXES = 2
MAX_RUNNING = 1  # sweeps in progress on the server (a sweep is many runs)
WALL_LIMIT_S = 300.0  # a sweep still running after this is stopped
MAX_FOLDERS = 8  # dashboard-written sweep folders kept
FOLDER = "dashboard-sweeps"


def parse_values(text: object, where: str) -> list[float | int]:
    """``"1, 2, 4"`` -> [1, 2, 4]; SpecError naming ``where`` for anything else."""
    if not isinstance(text, str) or not text.strip():
        raise SpecError("give the values to sweep, separated by commas (e.g. 2, 4, 8)", field=where)
    out: list[float | int] = []
    for part in text.split(","):
        p = part.strip()
        try:
            v = float(p)
        except ValueError:
            raise SpecError(f"expected numbers separated by commas, got {p!r}", field=where) from None
        if v != v or v in (float("inf"), float("-inf")):
            raise SpecError(f"expected a finite number, got {p!r}", field=where)
        out.append(int(v) if v.is_integer() else v)
    if len(set(out)) != len(out):
        raise SpecError("a value is listed twice", field=where)
    return out


def sweep_document(name: str, axes: list[tuple[str, list]]) -> dict:
    """The sweep file (pdsim sweep's format) over ``axes`` [(field path, values)] on base.yaml
    next to it; SpecError when it would plan more than MAX_CONFIGS configurations."""
    if not axes:
        raise SpecError("pick at least one knob to sweep", field="sweep axis 1")
    if len(axes) > MAX_AXES:
        raise SpecError(f"at most {MAX_AXES} axes", field="sweep axes")
    fields = [f for f, _v in axes]
    if len(set(fields)) != len(fields):
        raise SpecError("the two axes sweep the same knob", field="sweep axis 2")
    n = 1
    for _f, vals in axes:
        n *= len(vals)
    if n > MAX_CONFIGS:
        raise SpecError(f"{n} configurations; a sweep from the page runs at most {MAX_CONFIGS} (use pdsim sweep for "
                        "larger ones)", field="sweep values")
    return {"name": name, "description": "sweep started from the dashboard", "base": "base.yaml",
            "axes": [{"field": f, "values": list(v)} for f, v in axes]}


def _worker(sweep_file: str, out: str, trust, conn) -> None:  # runs in the child process
    from pdsim.explore import run_sweep

    def on_row(done: int, total: int) -> None:
        conn.send(("progress", int(done), int(total)))

    try:
        df = run_sweep(sweep_file, out, workers=1, progress=False, on_row=on_row, trust=trust)
        conn.send(("done", int(len(df)), int((df["status"] == "ok").sum())))
    except SpecError as err:
        conn.send(("failed", str(err)))
    except BaseException as err:  # noqa: BLE001 - reported to the page, never a crash of the app
        conn.send(("failed", f"{type(err).__name__}: {err}"))
    finally:
        conn.close()


@dataclass
class SweepJob:
    jid: str
    sid: str
    name: str
    folder: Path
    total: int
    status: str = "running"  # running | done | failed | cancelled
    done: int = 0
    ok: int = 0
    error: str | None = None
    started: float = field(default_factory=time.monotonic)

    @property
    def active(self) -> bool:
        return self.status == "running"


class SweepRunner:
    """The sweeps started from this server's pages."""

    def __init__(self, data_dir: Path, wall_limit_s: float = WALL_LIMIT_S):
        self.root = data_dir / FOLDER
        self.wall_limit_s = wall_limit_s
        self._ctx = mp.get_context("forkserver" if sys.platform.startswith("linux") else "spawn")
        self._jobs: dict[str, SweepJob] = {}
        self._procs: dict[str, mp.Process] = {}
        self._lock = threading.Lock()

    def start(self, sid: str, resolved, axes: list[tuple[str, list]], trust) -> SweepJob:
        """Start a sweep of ``resolved`` (the editor's scenario, validated) over ``axes``;
        SpecError when the sweep is malformed or a bound refuses it."""
        from pdsim.explore.plan import absolutize
        from pdsim.explore.what_if import plain

        safe = re.sub(r"[^A-Za-z0-9_-]+", "-", resolved.name).strip("-")[:40] or "scenario"
        name = f"{safe}-ui"
        doc = sweep_document(name, axes)
        with self._lock:
            mine = [j for j in self._jobs.values() if j.sid == sid and j.active]
            if mine:
                raise SpecError(f"sweep {mine[0].name} is still in progress: wait for it or cancel it", source="sweep")
            if sum(j.active for j in self._jobs.values()) >= MAX_RUNNING:
                raise SpecError("the server is running another sweep, its limit; try again when it ends",
                                source="sweep")
            folder = self.root / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
            total = 1
            for _f, v in axes:
                total *= len(v)
            job = SweepJob(uuid.uuid4().hex, sid, name, folder, total)
            self._jobs[job.jid] = job
        try:
            folder.mkdir(parents=True)
            base = absolutize(plain(resolved.scenario), [resolved.base_dir])
            (folder / "base.yaml").write_text(yaml.safe_dump(base, sort_keys=False))
            (folder / "sweep.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
            from pdsim.explore import plan_sweep

            plan_sweep(folder / "sweep.yaml", trust)  # a refused axis value: a message now, not a failed job
        except (OSError, SpecError) as err:
            with self._lock:
                self._jobs.pop(job.jid, None)
            shutil.rmtree(folder, ignore_errors=True)
            if isinstance(err, SpecError):
                raise SpecError(err.message, source="sweep", field=_axis_field(err.field, axes)) from None
            raise SpecError(f"cannot write the sweep folder: {err.strerror or err}", source=str(folder)) from None
        recv, send = self._ctx.Pipe(duplex=False)
        proc = self._ctx.Process(target=_worker, args=(str(folder / "sweep.yaml"), str(folder), trust, send),
                                 daemon=True, name=f"pdsim-sweep-{job.jid[:8]}")
        job.started = time.monotonic()  # the wall-time limit counts the sweep's run, not its planning
        proc.start()
        send.close()
        with self._lock:
            self._procs[job.jid] = proc
        threading.Thread(target=self._watch, args=(job, proc, recv), daemon=True).start()
        self._prune()
        return job

    def _watch(self, job: SweepJob, proc, conn) -> None:
        try:
            while True:
                left = self.wall_limit_s - (time.monotonic() - job.started)
                if left <= 0:
                    job.status, job.error = "failed", f"stopped after the {self.wall_limit_s:g} s limit"
                    proc.terminate()
                    break
                if not conn.poll(min(left, 0.5)):
                    if not proc.is_alive() and not conn.poll(0):
                        break
                    continue
                try:
                    msg = conn.recv()
                except (EOFError, OSError):
                    break
                if msg[0] == "progress":
                    job.done, job.total = msg[1], max(msg[2], 1)
                elif msg[0] == "done" and job.status == "running":
                    job.status, job.ok = "done", msg[2]
                elif msg[0] == "failed" and job.status == "running":
                    job.status, job.error = "failed", msg[1]
        finally:
            conn.close()
            proc.join(timeout=5)
            if job.status == "running":
                job.status = "failed"
                job.error = job.error or f"the sweep's process ended unexpectedly (exit code {proc.exitcode})"
            with self._lock:
                self._procs.pop(job.jid, None)

    def get(self, sid: str | None, jid: object) -> SweepJob | None:
        with self._lock:
            job = self._jobs.get(jid) if isinstance(jid, str) else None
            return job if job is not None and job.sid == sid else None

    def cancel(self, sid: str | None, jid: object) -> bool:
        return cancel_job(self.get(sid, jid), self._procs)

    def _prune(self) -> None:
        """Keep the newest MAX_FOLDERS folders this server's sweeps wrote (none in progress)."""
        with self._lock:
            busy = {j.folder for j in self._jobs.values() if j.active}
            mine = sorted((j for j in self._jobs.values() if j.folder not in busy), key=lambda j: j.started)
            drop = mine[:max(0, len(self._jobs) - MAX_FOLDERS)]
            for j in drop:
                self._jobs.pop(j.jid, None)
        for j in drop:
            shutil.rmtree(j.folder, ignore_errors=True)

    def shutdown(self) -> None:
        for job in list(self._jobs.values()):
            self.cancel(job.sid, job.jid)


def _axis_field(field: str | None, axes: list[tuple[str, list]]) -> str | None:
    """``axes[1]...`` of the sweep file -> ``sweep axis 2`` as the page names it."""
    m = re.match(r"axes\[(\d+)\]", field or "")
    if m and int(m.group(1)) < len(axes):
        return f"sweep axis {int(m.group(1)) + 1} ({axes[int(m.group(1))][0]})"
    return field
