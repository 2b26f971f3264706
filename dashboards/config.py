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
    """Bounds of the per-browser-session state (see sessions.py, jobs.py, uploads.py).

    Memory: a kept run's tables cost about 240 bytes per request in the server (a 2,000,000-
    request run, pdsim's request limit, holds ~480 MB, and rendering its results panel ~800 MB
    more while it is shown; reliability review SEC-D). The server keeps at most ``runs_total``
    results and ``kept_requests_total`` requests over all of them (~0.5 GB), plus one child
    process per run in progress (up to ~1.8 GB each at the request limit)."""

    max_upload_bytes: int = 20 * 2**20  # one uploaded file, as sent (compressed or not)
    max_expanded_bytes: int = 200 * 2**20  # a compressed upload, decompressed
    max_expansion_ratio: float = 100.0  # ... and at most this many times its compressed size
    expansion_floor_bytes: int = 16 * 2**20  # (small files may expand this far whatever the ratio)
    max_decompress_s: float = 20.0  # time spent checking a compressed upload's expansion
    upload_folder_bytes: int = 256 * 2**20  # all uploads of this server together
    uploads_per_session: int = 1  # a new trace upload replaces the session's previous one
    max_sessions: int = 64  # browser sessions with runs or uploads remembered
    session_idle_s: float = 6 * 3600.0  # a session unseen this long is forgotten (runs, uploads)
    session_protect_s: float = 1800.0  # a session seen this recently keeps its runs and uploads
    # however many new sessions arrive (one with a run in progress always does)
    sessions_per_client: int = 32  # sessions with runs or uploads per client address
    runs_per_session: int = 4  # finished runs kept per session (oldest dropped)
    runs_total: int = 8  # finished runs kept by the server
    kept_requests_total: int = 2_000_000  # requests in all kept runs together (~0.5 GB)
    max_pins: int = 8  # runs overlaid on Compare
    running_per_session: int = 1  # runs in progress per session
    running_total: int = field(default_factory=lambda: max(1, min(4, os.cpu_count() or 1)))
    run_wall_s: float = 300.0  # a run still going after this many seconds is stopped


def check_bind_host(host: object) -> str:
    """``host`` if it names an address to bind; SpecError for an empty one (Flask would quietly
    bind 127.0.0.1 while the exposure check saw no address)."""
    from pdsim.specs.errors import SpecError

    if not isinstance(host, str) or not host.strip():
        raise SpecError("empty bind address; give 127.0.0.1 (this machine only, the default) or the address "
                        "of the interface to serve on (0.0.0.0: all of them)", source="pdsim dashboard", field="--host")
    return host.strip()


@dataclass(frozen=True)
class DashboardConfig:
    data_dir: Path  # user files a scenario may reference (traces, hardware/model YAML), sweep results
    sweep_roots: tuple[Path, ...] = ()  # extra folders searched for sweep results (--sweeps DIR)
    limits: Limits = field(default_factory=Limits)
    debug: bool = False  # tracebacks of unexpected callback failures in the server log
    host: str = "127.0.0.1"  # the bind address (its name is an allowed Host header)
    allow_hosts: tuple[str, ...] = ()  # more Host header names answered (--allow-host), see exposure.py

    @classmethod
    def make(cls, data_dir: str | Path | None = None, sweep_roots: tuple[str | Path, ...] = (),
             limits: Limits | None = None, debug: bool = False, host: str = "127.0.0.1",
             allow_hosts: tuple[str, ...] = ()) -> "DashboardConfig":
        from pdsim.specs.errors import SpecError

        check_bind_host(host)
        for h in allow_hosts:
            if not isinstance(h, str) or not h.strip() or any(c in h for c in "/ \t@*"):
                raise SpecError(f"{h!r} is not a host name or address (one name per --allow-host, no wildcards)",
                                source="pdsim dashboard", field="--allow-host")

        data = Path(data_dir or ".").expanduser().resolve()
        if not data.is_dir():
            raise SpecError("not a folder", source=str(data_dir), field="--data")
        roots = []
        for r in sweep_roots:
            p = Path(r).expanduser().resolve()
            if not p.is_dir():
                raise SpecError("not a folder", source=str(r), field="--sweeps")
            roots.append(p)
        return cls(data, tuple(roots), limits or Limits(), debug, host.strip(), tuple(h.strip() for h in allow_hosts))

    def trust(self, upload_dir: Path) -> Trust:
        """The trust of every scenario this server resolves: no ``module:Class`` plug-ins, files
        only in the data folder, this server's uploads and pdsim's bundled data."""
        return Trust.sandboxed(self.data_dir, upload_dir)
