"""The server-side state of one dashboard app, in one place: its configuration, the sandbox
scenarios are resolved in, browser sessions, background runs, uploads and the sweep folders.
Forgetting a session (too many, or idle too long) drops its runs and deletes its uploads."""
from __future__ import annotations

from dataclasses import dataclass

from .config import DashboardConfig
from .jobs import JobManager
from .sessions import Sessions
from .sweeps import SweepCatalog
from .uploads import UploadStore
from .validation import Sandbox


@dataclass
class Services:
    config: DashboardConfig
    jobs: JobManager
    uploads: UploadStore
    sessions: Sessions
    sweeps: SweepCatalog
    sandbox: Sandbox

    @classmethod
    def make(cls, config: DashboardConfig, jobs: JobManager | None = None) -> "Services":
        limits = config.limits
        jobs = jobs or JobManager(limits)
        uploads = UploadStore(limits, in_use=jobs.in_use)
        sessions = Sessions(limits.max_sessions, limits.session_idle_s)
        sessions.on_forget(jobs.drop_session)
        sessions.on_forget(uploads.drop_session)
        return cls(config, jobs, uploads, sessions, SweepCatalog(config.data_dir, config.sweep_roots),
                   Sandbox(config.data_dir, uploads.folder))

    def session(self, sid: object) -> str:
        """The request's session id, checked and marked as used (SpecError when invalid);
        uploads no run reads any more are deleted on the way."""
        sid = self.sessions.touch(sid)
        self.uploads.collect()
        return sid

    def close(self) -> None:
        self.jobs.shutdown()
        self.uploads.close()
