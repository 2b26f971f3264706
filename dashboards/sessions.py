"""Browser sessions: the server issues each page a session id (kept in a dcc.Store in the tab's
sessionStorage), and every run and upload the server keeps belongs to one session.

Ids are issued, not chosen: an id is a 144-bit random token and its HMAC-SHA256 tag under a key
this server process draws at start (``new_session_id``), so a made-up id, or one from before a
restart, is refused on every callback (``check_session_id``; the page is then given a fresh one,
app.py). Issuing costs the server nothing: it remembers a session only once it is used.

``Sessions`` remembers the ids in use, least recently seen first, bounded by count and idle
time. Forgetting a session tells the listeners (the job manager, the upload store), which drop
its runs and delete its files. Because any client can ask for as many ids as it likes, making
room never takes state that someone is using: a session with a run in progress is never
forgotten (the run's wall-time limit ends it), and a session holding runs or uploads is
forgotten only once unseen for ``protect_s``, or ``idle_s``; sessions holding nothing go first.
When no session can make room, a new session may still browse, but storing a run or an upload
is refused with a message (``admit``). One client address may hold at most ``per_client``
sessions with state, so one machine cannot take every place of a server shared over a network
(on a loopback server every client is 127.0.0.1, and this bound is the server's).
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable

from pdsim.specs.errors import SpecError

# Drawn once per server process: ids issued by another process (or before a restart) are refused.
_KEY = secrets.token_bytes(32)
SESSION_ID = re.compile(r"^([A-Za-z0-9_-]{24})\.([A-Za-z0-9_-]{22})$")
INVALID = "this page's session was not issued by this server (or the server restarted); reload the page"


def _tag(token: str) -> str:
    digest = hmac.new(_KEY, token.encode("ascii"), hashlib.sha256).digest()[:16]
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def new_session_id() -> str:
    """A fresh session id issued by this server: 18 random bytes and a 128-bit tag, URL-safe
    base64 joined by a dot (47 characters)."""
    token = secrets.token_urlsafe(18)
    return f"{token}.{_tag(token)}"


def is_issued(sid: object) -> bool:
    """Whether ``sid`` is an id this server process issued (constant-time tag comparison)."""
    m = SESSION_ID.match(sid) if isinstance(sid, str) else None
    return m is not None and hmac.compare_digest(m.group(2), _tag(m.group(1)))


def check_session_id(sid: object) -> str:
    if not is_issued(sid):
        raise SpecError(INVALID, source="session")
    return sid  # type: ignore[return-value]


def client_address() -> str:
    """The address of the client of the HTTP request being handled ("" outside a request)."""
    try:
        from flask import has_request_context, request
    except ImportError:  # pragma: no cover - Flask comes with Dash
        return ""
    return (request.remote_addr or "") if has_request_context() else ""


ADMIT_HOLD_S = 10.0  # an admitted session counts as keeping state this long, while it stores it


@dataclass
class _Seen:
    at: float  # last use (clock seconds)
    client: str  # address that first used it
    admitted: float = float("-inf")  # last admission: its run or upload may not be stored yet


class Sessions:
    def __init__(self, max_sessions: int, idle_s: float, clock: Callable[[], float] = time.monotonic,
                 protect_s: float | None = None, per_client: int | None = None):
        self.max_sessions, self.idle_s, self._clock = max_sessions, idle_s, clock
        self.protect_s = idle_s if protect_s is None else protect_s
        self.per_client = max_sessions if per_client is None else per_client
        self._seen: OrderedDict[str, _Seen] = OrderedDict()
        self._listeners: list[Callable[[str], None]] = []
        self._holds: list[Callable[[str], bool]] = []  # does the session keep runs or uploads?
        self._running: list[Callable[[str], bool]] = []  # does it have a run in progress?
        self._lock = threading.Lock()

    def on_forget(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(sid)`` whenever a session is forgotten (evicted or idle too long)."""
        self._listeners.append(listener)

    def state_from(self, holds: Callable[[str], bool], running: Callable[[str], bool] | None = None) -> None:
        """Register what a session keeps: ``holds(sid)`` (runs, uploads) and ``running(sid)`` (a
        run in progress). They decide which sessions may be forgotten to make room."""
        self._holds.append(holds)
        if running is not None:
            self._running.append(running)

    def _has_state(self, sid: str) -> bool:
        return any(f(sid) for f in self._holds)

    def _keeps(self, sid: str, now: float) -> bool:
        """Whether ``sid`` keeps state, or was just admitted to store some. Caller holds the lock."""
        return now - self._seen[sid].admitted < ADMIT_HOLD_S or self._has_state(sid)

    def _is_running(self, sid: str) -> bool:
        return any(f(sid) for f in self._running)

    def touch(self, sid: object, client: str = "") -> str:
        """Validate ``sid`` (SpecError unless this server issued it), mark it as just used and
        forget the sessions idle too long; a new session is remembered if there is room."""
        sid = check_session_id(sid)
        now = self._clock()
        with self._lock:
            gone = [s for s, e in self._seen.items()
                    if s != sid and now - e.at > self.idle_s and not self._is_running(s)]
            for s in gone:
                del self._seen[s]
            if sid in self._seen:
                self._seen[sid].at = now
                self._seen.move_to_end(sid)
            else:
                victim = self._room(now) if len(self._seen) >= self.max_sessions else None
                if victim is not None:
                    del self._seen[victim]
                    gone.append(victim)
                if len(self._seen) < self.max_sessions:
                    self._seen[sid] = _Seen(now, client)
        for s in gone:
            self._notify(s)
        return sid

    def _room(self, now: float) -> str | None:
        """The session to forget for a new one: the least recently seen holding nothing, else the
        least recently seen unseen for ``protect_s`` with no run in progress; None when every
        session is in use. Caller holds the lock."""
        for s in self._seen:  # least recently seen first
            if not self._keeps(s, now):
                return s
        for s, e in self._seen.items():
            if now - e.at > self.protect_s and not self._is_running(s):
                return s
        return None

    def admit(self, sid: object, client: str = "") -> str:
        """``sid`` checked and remembered before it stores a run or an upload; SpecError when the
        server keeps the state of ``max_sessions`` sessions in use, or this client address already
        keeps ``per_client`` of them."""
        sid = self.touch(sid, client)
        with self._lock:
            if sid not in self._seen:
                raise SpecError(f"the server keeps runs and uploads of {len(self._seen)} sessions in use, its limit; "
                                "try again later", source="session")
            entry, now = self._seen[sid], self._clock()
            if not self._keeps(sid, now):
                mine = sum(1 for s, e in self._seen.items()
                           if s != sid and e.client == entry.client and self._keeps(s, now))
                if mine >= self.per_client:
                    raise SpecError(f"this client ({entry.client or 'local'}) keeps runs or uploads in {mine} "
                                    "sessions, its limit; use one of its pages or try again later", source="session")
            entry.admitted = now  # not a victim while it stores its run or upload (another thread may make room)
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
