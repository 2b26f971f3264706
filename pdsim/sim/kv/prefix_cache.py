"""HBM prefix cache over an instance's paged KV pool (block-hash, like SGLang's radix cache
keyed by the trace's prefix-chained block ids).

Blocks are ``block_tokens`` tokens (= ``pages_per_block`` pages). A block is referenced by the
requests using it; unreferenced blocks stay cached and are evicted in LRU order when the pool
needs pages, written back to the offload tiers if any (or already there, write-through).

Bookkeeping in spans, not blocks, so a request costs no Python work per block:

- the blocks a request adopts after its prefill form one span it owns (its ``Hold``); the
  request's own reference to them is the span's ``held`` flag, dropped for all of them at once;
- the cached blocks a request found and reuses (its prefix hit) are referenced one by one
  (``extra``), and are few;
- the LRU is a sequence of spans: a span joins its young end when its owner lets go (its
  blocks not referenced by others, in key order), and a block whose last reference goes later
  moves to a span of that release. Eviction takes spans from the old end, whole or in part;
  a block that moved on, or is referenced again, stays listed in its old span and is skipped
  there (``ref`` names the span each cached block is in now).

Blocks leave in exactly the order of a per-block LRU (oldest release first, key order within a
release), so results are those of tracking every block alone.
"""
from __future__ import annotations

from itertools import islice
from typing import Hashable

from .pool import KVPool
from .tiers import TierStack


class _Span:
    """Cached blocks listed in LRU order (from ``pos``). ``held``: the owning request still
    references them; ``pinned``: how many of them (while they are in this span) other requests
    reference; ``live``: once released, how many listed from ``pos`` on are still here and
    unreferenced (evictable); ``sid``: its place in the LRU once released."""

    __slots__ = ("keys", "pos", "held", "pinned", "live", "sid")

    def __init__(self, keys: list, held: bool):
        self.keys = keys
        self.pos = 0
        self.held = held
        self.pinned = 0
        self.live = 0
        self.sid = 0


class Hold:
    """A request's references: ``head``, cached blocks it reuses (one reference each, a key
    twice if listed twice), and ``own``, the span of blocks it adopted (None before). Never
    empty (made with a prefix hit or with adopted blocks), so always true: it defines no
    ``__len__`` or ``__bool__``, and a truth test costs no Python call (``blocks`` counts)."""

    __slots__ = ("head", "own")

    def __init__(self, head: list):
        self.head = head
        self.own: _Span | None = None

    def blocks(self) -> int:
        """Blocks referenced: the prefix hit's and the adopted ones."""
        return len(self.head) + (len(self.own.keys) if self.own is not None else 0)


class PrefixCache:
    def __init__(self, pool: KVPool, block_tokens: int, pages_per_block: int, tiers: TierStack | None,
                 write_through: bool):
        self.pool = pool
        self.block_tokens = block_tokens
        self.ppb = pages_per_block
        self.tiers = tiers
        self.write_through = write_through
        self.ref: dict[Hashable, _Span] = {}  # cached block -> the span it is in
        self.extra: dict[Hashable, int] = {}  # block -> references by requests that found it cached
        self.lru: dict[int, _Span] = {}  # released spans with evictable blocks, oldest first
        self._sid = 0
        self.evictable_pages = 0
        self.lookup_tokens = 0
        self.hit_tokens = 0
        self.evicted_blocks = 0

    def match(self, keys, limit: int) -> int:
        """Number of leading blocks of ``keys[:limit]`` resident in HBM."""
        m = 0
        ref = self.ref
        while m < limit and keys[m] in ref:
            m += 1
        return m

    def match_evictable(self, keys, limit: int) -> tuple[int, int]:
        """``match(keys, limit)`` and ``evictable_among`` of the matched keys in one pass: the
        leading blocks resident in HBM, and the pages of those that are unreferenced."""
        ref, extra = self.ref, self.extra
        m = n = 0
        while m < limit:
            k = keys[m]
            if k not in ref:
                break
            if not ref[k].held and k not in extra:
                n += 1
            m += 1
        return m, n * self.ppb

    def evictable_among(self, keys) -> int:
        """Pages of cached ``keys`` that are unreferenced (would stop being evictable)."""
        ref, extra = self.ref, self.extra
        n = 0
        for k in keys:  # a plain loop: a generator expression resumes a frame per key
            if not ref[k].held and k not in extra:
                n += 1
        return n * self.ppb

    def acquire(self, keys: list) -> Hold:
        """Reference the cached blocks ``keys`` (a prefix hit); returns the request's hold."""
        ref, extra = self.ref, self.extra
        for k in keys:
            e = extra.get(k, 0)
            if not e:
                span = ref[k]
                span.pinned += 1
                if not span.held:  # it was evictable: it leaves its LRU place
                    span.live -= 1
                    self.evictable_pages -= self.ppb
                    if not span.live:
                        del self.lru[span.sid]
            extra[k] = e + 1
        return Hold(keys)

    @staticmethod
    def new_span() -> _Span:
        """An empty span, held, for ``adopt_new``."""
        return _Span([], True)

    def adopt_new(self, hold: Hold | None, span: _Span, keys: dict, now: float) -> Hold:
        """The request's private blocks ``keys`` (distinct, none cached; each mapped to ``span``,
        from ``new_span``) become cached blocks it references (its own span); returns its hold."""
        if hold is None:
            hold = Hold([])
        if hold.own is not None:  # adopting again (not a path the engine takes): its span grows
            span = hold.own
            keys = dict.fromkeys(keys, span)
        hold.own = span
        span.keys += keys
        self.ref.update(keys)
        if self.tiers is not None and self.write_through:
            for key in keys:
                self.tiers.store(key, now)
        return hold

    def release(self, hold: Hold) -> None:
        """Drop a request's references. Blocks left unreferenced join the LRU's young end in
        key order (its prefix hit first, then its own blocks), as one at a time would."""
        ref, extra = self.ref, self.extra
        moved = []
        for k in hold.head:
            e = extra[k] - 1
            if e:
                extra[k] = e
                continue
            del extra[k]
            span = ref[k]
            span.pinned -= 1
            if not span.held:  # its span let go of it already: unreferenced from now on
                moved.append(k)
        if moved:
            span = _Span(moved, False)
            self.ref.update(dict.fromkeys(moved, span))
            self._enter(span, len(moved))
        own = hold.own
        if own is not None:
            own.held = False
            self._enter(own, len(own.keys) - own.pinned)

    def _enter(self, span: _Span, live: int) -> None:
        span.live = live
        if live:
            self._sid += 1
            span.sid = self._sid
            self.lru[self._sid] = span
            self.evictable_pages += live * self.ppb

    def _evict(self, n: int) -> list:
        """Take the ``n`` oldest unreferenced blocks out of the cache (there are at least
        ``n``); returns their keys, oldest first. The pool is the caller's."""
        ref, extra, lru = self.ref, self.extra, self.lru
        out: list = []
        while len(out) < n:
            span = next(iter(lru.values()))
            want = n - len(out)
            keys, pos = span.keys, span.pos
            if span.live == len(keys) - pos:  # nothing stale left in it: a slice
                take = keys[pos:pos + want]
                pos += len(take)
            else:  # skip the keys that moved on or are referenced again, up to ``want`` taken
                take = []
                for k in islice(keys, pos, None):
                    pos += 1
                    if ref.get(k) is span and k not in extra:
                        take.append(k)
                        if len(take) == want:
                            break
            span.pos = pos
            span.live -= len(take)
            if not span.live:
                del lru[span.sid]
            for k in take:  # out of the cache; a plain loop: map(ref.__delitem__) was 2x slower
                del ref[k]
            out += take
        self.evictable_pages -= n * self.ppb
        self.evicted_blocks += n
        return out

    def make_room(self, pages: int, now: float) -> None:
        """Evict unreferenced blocks (LRU) until ``pages`` are free or nothing is evictable."""
        pool, ppb = self.pool, self.ppb
        short = pages - pool.free
        if short <= 0 or not self.evictable_pages:
            return
        n = min(-(-short // ppb), self.evictable_pages // ppb)  # blocks to evict
        keys = self._evict(n)
        if self.tiers is None:
            self._release_blocks(n)
            return
        for key in keys:
            pool.release(ppb)
            self.tiers.store(key, now)  # write-back on eviction (no-op if already stored)

    def _release_blocks(self, n: int) -> None:
        """``n`` evicted blocks' pages back to the pool: ``KVPool.release`` of each block done
        inline on local counters (the same arithmetic in the same order, bit for bit)."""
        pool, ppb = self.pool, self.ppb
        used, live = pool.used, pool.live_runs
        if n * ppb > used:
            raise RuntimeError(f"KV pool released {n * ppb} pages but only {used} are in use")
        for u in range(used, used - n * ppb, -ppb):  # ``used`` before each block's release
            live -= live * ppb / u
        used -= n * ppb
        if used == 0:  # as KVPool.release: an empty pool is fresh again
            live = 0.0
            pool.fresh = pool.capacity
        pool.used, pool.live_runs = used, live
        pool.free += n * ppb

    def clear(self) -> None:
        """Forget every block (the instance's HBM is gone): their pages go back to the pool.
        Blocks must be unreferenced (the requests using them were taken off first)."""
        held = len(self.extra) + sum(1 for s in set(self.ref.values()) if s.held)
        if held:
            raise RuntimeError(f"prefix cache cleared while {held} blocks (or spans) are still referenced")
        self.pool.release(self.evictable_pages)
        self.ref.clear()
        self.lru.clear()
        self.evictable_pages = 0
