"""Browser sessions: each page holds a random session id (a dcc.Store kept in the tab's
sessionStorage), and every run and upload the server keeps belongs to one session.

``Sessions`` remembers the ids it has seen, least recently used first, bounded by count and
idle time. Forgetting a session tells the listeners (the job manager, the upload store), which
drop its runs and delete its files, so no per-browser structure grows without bound. A client
can make up ids, but it can only ever reach state filed under the id it sends, and ids are
128-bit random tokens, so one browser cannot guess another's.
"""
from __future__ import annotations

import re
import secrets
import threading
import time
from collections import OrderedDict
from typing import Callable

from pdsim.specs.errors import SpecError

SESSION_ID = re.compile(r"^[A-Za-z0-9_-]{16,64}$")


def new_session_id() -> str:
    """A fresh session id: 18 random bytes, URL-safe base64 (24 characters)."""
    return secrets.token_urlsafe(18)


def check_session_id(sid: object) -> str:
    if not isinstance(sid, str) or not SESSION_ID.match(sid):
        raise SpecError("this page has no valid session; reload the page", source="session")
    return sid


class Sessions:
    def __init__(self, max_sessions: int, idle_s: float, clock: Callable[[], float] = time.monotonic):
        self.max_sessions, self.idle_s, self._clock = max_sessions, idle_s, clock
        self._seen: OrderedDict[str, float] = OrderedDict()
        self._listeners: list[Callable[[str], None]] = []
        self._lock = threading.Lock()

    def on_forget(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(sid)`` whenever a session is forgotten (evicted or idle too long)."""
        self._listeners.append(listener)

    def touch(self, sid: object) -> str:
        """Validate ``sid``, mark it as just used, forget the sessions beyond the bounds."""
        sid = check_session_id(sid)
        now = self._clock()
        with self._lock:
            self._seen[sid] = now
            self._seen.move_to_end(sid)
            gone = [s for s, t in self._seen.items() if now - t > self.idle_s and s != sid]
            overflow = len(self._seen) - len(gone) - self.max_sessions
            gone += [s for s in self._seen if s not in gone and s != sid][:max(0, overflow)]
            for s in gone:
                del self._seen[s]
        for s in gone:
            self._notify(s)
        return sid

    def forget(self, sid: str) -> None:
        with self._lock:
            known = self._seen.pop(sid, None) is not None
        if known:
            self._notify(sid)

    def _notify(self, sid: str) -> None:
        for listener in self._listeners:
            listener(sid)

    def __contains__(self, sid: object) -> bool:
        with self._lock:
            return sid in self._seen

    def __len__(self) -> int:
        with self._lock:
            return len(self._seen)
