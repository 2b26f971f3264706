"""The server-side state of one dashboard app, in one place: its configuration, the sandbox
scenarios are resolved in, browser sessions, background runs, uploads and the sweep folders.
Forgetting a session (idle too long, or room needed and it is neither running nor recently
seen) drops its runs and deletes its uploads; storing a run or an upload admits the session first."""
from __future__ import annotations

from dataclasses import dataclass

from .config import DashboardConfig
from .jobs import JobManager
from .sessions import Sessions, client_address
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
        sessions = Sessions(limits.max_sessions, limits.session_idle_s, protect_s=limits.session_protect_s,
                            per_client=limits.sessions_per_client)
        sessions.on_forget(jobs.drop_session)
        sessions.on_forget(uploads.drop_session)
        sessions.state_from(jobs.holds, jobs.running)
        sessions.state_from(uploads.holds)
        jobs.admit = uploads.admit = lambda sid: sessions.admit(sid, client_address())
        return cls(config, jobs, uploads, sessions, SweepCatalog(config.data_dir, config.sweep_roots),
                   Sandbox(config.data_dir, uploads.folder))

    def session(self, sid: object) -> str:
        """The request's session id, checked (SpecError unless this server issued it) and marked
        as used; uploads no run reads any more are deleted on the way. Every callback that reads
        or stores a session's state gets its id here."""
        sid = self.sessions.touch(sid, client_address())
        self.uploads.collect()
        return sid

    def close(self) -> None:
        self.jobs.shutdown()
        self.uploads.close()
