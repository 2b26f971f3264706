"""Bounded reads and shape checks for what a server sends a replay (or the P/D proxy).

A server under test may be broken or hostile: an endless error body, an event with no end, a
token count of 10^12, JSON nested 100,000 deep, a list where an object belongs. Nothing it
sends may exhaust the client's memory or abort the run: every read here stops at a byte limit,
every parse refuses what is not the expected shape with a short reason (``Malformed``), and the
caller fails the one request (or the one server-info question) it concerns.

Limits (bytes) and why they are large enough:
- ``ERROR_BODY``: an HTTP error's body is kept for its message only (the record keeps 300
  characters of it).
- ``EVENT``: one server-sent event; a chunk carries one or a few tokens, so even a 10 MB line of
  generated text (a probe of the review) fits. ``EVENTS_HELD``: what all streams of a run may
  hold together in partial events past their first MiB each (so 1,024 streams in flight cannot
  hold 1,024 x 32 MiB).
- ``INFO``: ``/v1/models``, ``/version``, ``/get_server_info``: a few kB in vLLM and SGLang.
- ``TOKENIZE``: ``/tokenize`` of a prompt of up to a few 100k tokens (~7 bytes per id).
- ``METRICS``: vLLM's Prometheus page (a few 100 kB with histograms).
"""
from __future__ import annotations

import contextlib
import json

ERROR_BODY = 4096
EVENT = 32 * 2**20
EVENTS_HELD = 256 * 2**20
FREE_PER_STREAM = 2**20
INFO = 4 * 2**20
TOKENIZE = 16 * 2**20
METRICS = 16 * 2**20
# a server may count a few tokens more than asked (e.g. a stop token it streams); more than this
# is a count no request of this size can have, refused before anything is allocated for it
COUNT_SLACK = 16


class Malformed(ValueError):
    """What the server sent is not what its API answers; ``str()`` says what and where."""


class NotJSON(Malformed):
    """Bytes that are not UTF-8 JSON at all (an HTML page, plain text)."""


class TooLong(Malformed):
    """A body or event past its byte limit (the rest is not read)."""


class HeldBytes:
    """The bytes of partial events a run's streams hold, past ``FREE_PER_STREAM`` each, within
    ``total``: ``hold(before, now)`` moves one stream's count and raises TooLong past the total."""

    def __init__(self, total: int | None = None):
        self.total, self.used = EVENTS_HELD if total is None else total, 0

    def hold(self, before: int, now: int) -> int:
        """Account one stream going from ``before`` to ``now`` held bytes; returns ``now``."""
        self.used += now - before
        if self.used > self.total:
            self.used -= now - before
            raise TooLong(f"unfinished stream events of all requests past {_size(self.total)} (this request's "
                          f"{_size(now + FREE_PER_STREAM)}; not read further)")
        return now


@contextlib.contextmanager
def body_ends_with_connection(resp):
    """While in this block, a body still open when its connection closes is failed
    (``ClientPayloadError``) instead of left waiting.

    aiohttp 3.14's C parser, meeting a malformed chunk after the headers were handed out, puts
    its error on the connection only and never ends the body, so a reader waits for the request
    timeout (a server that writes ``zz`` as a chunk size and closes: the reader hung in 73 of 200
    tries, 0 of 100 with the pure-Python parser; tests/test_replay_hostile.py). A body that
    ended, or failed as it should, is left alone; the watch is removed when the block ends, so a
    kept-alive connection does not collect one per request."""
    import aiohttp

    content = resp.content
    conn = resp.connection
    closed = conn.protocol.closed if conn is not None and conn.protocol is not None else None

    def fail_if_open(_fut=None) -> None:
        if not content.is_eof() and content.exception() is None:
            content.set_exception(aiohttp.ClientPayloadError("the connection closed before the body ended"))

    if closed is None:  # closed already (or no connection): nothing more can arrive
        if conn is None or conn.protocol is None or conn.protocol.transport is None:
            fail_if_open()
        yield
        return
    closed.add_done_callback(fail_if_open)
    try:
        yield
    finally:
        closed.remove_done_callback(fail_if_open)


async def read_bounded(resp, limit: int, what: str = "answer") -> bytes:
    """At most ``limit`` bytes of an aiohttp response body; TooLong when there are more.
    Reads in pieces, so an endless body costs ``limit`` bytes of memory, not the body."""
    out = bytearray()
    with body_ends_with_connection(resp):
        while len(out) <= limit:
            piece = await resp.content.read(min(1 << 20, limit + 1 - len(out)))
            if not piece:
                return bytes(out)
            out.extend(piece)
    raise TooLong(f"{what} longer than {_size(limit)} (not read further)")


async def discard_bounded(resp, limit: int, what: str = "answer") -> int:
    """Read and drop an aiohttp response body of at most ``limit`` bytes (its length); TooLong
    when there are more. Holds one 64 KiB piece at a time, whatever the body."""
    n = 0
    with body_ends_with_connection(resp):
        while True:
            piece = await resp.content.read(1 << 16)
            if not piece:
                return n
            n += len(piece)
            if n > limit:
                raise TooLong(f"{what} longer than {_size(limit)} (not read further)")


async def error_text(resp, limit: int = ERROR_BODY) -> str:
    """The start of an error body, as text (undecodable bytes replaced); never the whole body."""
    try:
        raw = await read_bounded(resp, limit, "error body")
        more = ""
    except TooLong:
        raw, more = b"", " (error body longer than " + _size(limit) + ", not read)"
    return raw[:300].decode("utf-8", errors="replace") + more


def loads(raw: bytes, what: str):
    """JSON from bytes; Malformed for bytes that are not UTF-8 JSON or are nested too deeply."""
    try:
        return json.loads(raw)
    except RecursionError:
        raise Malformed(f"{what}: JSON nested too deeply") from None
    except UnicodeDecodeError as err:
        raise NotJSON(f"{what}: not UTF-8 (byte 0x{raw[err.start]:02x} at {err.start})") from None
    except ValueError as err:  # JSONDecodeError
        raise NotJSON(f"{what}: not JSON ({getattr(err, 'msg', err)}): {short(raw)}") from None


def short(x, n: int = 80) -> str:
    """A short excerpt of a value for a message."""
    s = repr(x) if not isinstance(x, (bytes, bytearray)) else repr(bytes(x[: n + 1]))
    return s if len(s) <= n else s[: n - 1] + "…"


def obj(d: dict, key: str, where: str, kinds: tuple = (dict,)):
    """``d[key]`` when it is absent/None (-> None) or of one of ``kinds``; else Malformed."""
    v = d.get(key)
    if v is None or (isinstance(v, kinds) and not isinstance(v, bool)):
        return v
    want = " or ".join({dict: "an object", list: "a list", str: "a string", int: "an integer"}.get(k, k.__name__)
                       for k in kinds)
    raise Malformed(f"{where}{key}: expected {want}, got {short(v)}")


def count(d: dict, key: str, where: str, most: int) -> int | None:
    """A token count ``d[key]``: None when absent, else an integer in [0, most]; a count past
    ``most`` is implausible for the request and refused (nothing is allocated by it)."""
    v = d.get(key)
    if v is None:
        return None
    if type(v) is not int or v < 0:
        raise Malformed(f"{where}{key}: expected a token count (an integer >= 0), got {short(v)}")
    if v > most:
        raise Malformed(f"{where}{key}: {v:,} tokens is implausible (at most {most:,} for this request)")
    return v


def _size(n: int) -> str:
    return f"{n // 2**20} MiB" if n >= 2**20 else f"{n // 1024} KiB" if n >= 1024 else f"{n} bytes"
