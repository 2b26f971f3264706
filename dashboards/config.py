"""What one dashboard server may touch and how much it may hold.

``DashboardConfig`` is made once by ``pdsim dashboard`` (or a test) and handed to every part of
the app: the data folder (the only user folder a scenario may read files from, besides pdsim's
bundled data and this server's own upload folder), the folders searched for sweep results, and
the limits that keep a server shared by several browsers bounded in memory and disk.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from pdsim.specs.trust import Trust


@dataclass(frozen=True)
class Limits:
    """Bounds of the per-browser-session state (see sessions.py, jobs.py, uploads.py)."""

    max_upload_bytes: int = 20 * 2**20  # one uploaded file, decoded
    upload_folder_bytes: int = 256 * 2**20  # all uploads of this server together
    uploads_per_session: int = 1  # a new trace upload replaces the session's previous one
    max_sessions: int = 64  # browser sessions remembered; the least recently seen goes first
    session_idle_s: float = 6 * 3600.0  # a session unseen this long is forgotten (runs, uploads)
    runs_per_session: int = 8  # finished runs kept per session (oldest dropped)
    runs_total: int = 16  # finished runs kept by the server (a large run's tables are ~100 MB)
    max_pins: int = 8  # runs overlaid on Compare
    running_total: int = field(default_factory=lambda: max(1, min(4, os.cpu_count() or 1)))
    # at most one run in progress per session, and ``running_total`` on the server


@dataclass(frozen=True)
class DashboardConfig:
    data_dir: Path  # user files a scenario may reference (traces, hardware/model YAML), sweep results
    sweep_roots: tuple[Path, ...] = ()  # extra folders searched for sweep results (--sweeps DIR)
    limits: Limits = field(default_factory=Limits)
    debug: bool = False  # tracebacks of unexpected callback failures in the server log

    @classmethod
    def make(cls, data_dir: str | Path | None = None, sweep_roots: tuple[str | Path, ...] = (),
             limits: Limits | None = None, debug: bool = False) -> "DashboardConfig":
        from pdsim.specs.errors import SpecError

        data = Path(data_dir or ".").expanduser().resolve()
        if not data.is_dir():
            raise SpecError("not a folder", source=str(data_dir), field="--data")
        roots = []
        for r in sweep_roots:
            p = Path(r).expanduser().resolve()
            if not p.is_dir():
                raise SpecError("not a folder", source=str(r), field="--sweeps")
            roots.append(p)
        return cls(data, tuple(roots), limits or Limits(), debug)

    def trust(self, upload_dir: Path) -> Trust:
        """The trust of every scenario this server resolves: no ``module:Class`` plug-ins, files
        only in the data folder, this server's uploads and pdsim's bundled data."""
        return Trust.sandboxed(self.data_dir, upload_dir)
