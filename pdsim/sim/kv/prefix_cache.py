"""HBM prefix cache over an instance's paged KV pool (block-hash, like SGLang's radix cache
keyed by the trace's prefix-chained block ids).

Blocks are ``block_tokens`` tokens (= ``pages_per_block`` pages). A block is referenced by the
requests using it; unreferenced blocks stay cached and are evicted in LRU order when the pool
needs pages, written back to the offload tiers if any (or already there, write-through).
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Hashable

from .pool import KVPool
from .tiers import TierStack


class PrefixCache:
    def __init__(self, pool: KVPool, block_tokens: int, pages_per_block: int, tiers: TierStack | None,
                 write_through: bool):
        self.pool = pool
        self.block_tokens = block_tokens
        self.ppb = pages_per_block
        self.tiers = tiers
        self.write_through = write_through
        self.ref: dict[Hashable, int] = {}
        self.lru: OrderedDict[Hashable, None] = OrderedDict()  # unreferenced blocks, oldest first
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

    def evictable_among(self, keys) -> int:
        """Pages of ``keys`` that are cached but unreferenced (would stop being evictable)."""
        return sum(self.ppb for k in keys if self.ref.get(k) == 0)

    def acquire(self, keys) -> None:
        for k in keys:
            if self.ref[k] == 0:
                del self.lru[k]
                self.evictable_pages -= self.ppb
            self.ref[k] += 1

    def release(self, keys) -> None:
        ref, lru = self.ref, self.lru
        left = dict(zip(keys, [ref[k] - 1 for k in keys]))
        if len(left) != len(keys):  # a key held twice: one reference at a time
            for k in keys:
                r = ref[k] - 1
                ref[k] = r
                if r == 0:
                    lru[k] = None
                    self.evictable_pages += self.ppb
            return
        ref.update(left)
        unheld = [k for k, r in left.items() if r == 0]  # in key order, as one at a time would
        if unheld:
            lru.update(dict.fromkeys(unheld))
            self.evictable_pages += len(unheld) * self.ppb

    def adopt(self, key: Hashable, now: float) -> bool:
        """Turn a request's private block into a cached block it references. False if the key
        is already cached (another request inserted it first): the pages stay private."""
        if key in self.ref:
            return False
        self.ref[key] = 1
        if self.tiers is not None and self.write_through:
            self.tiers.store(key, now)
        return True

    def adopt_new(self, keys: list, now: float) -> None:
        """``adopt`` for distinct keys known not to be cached: each is referenced once."""
        self.ref.update(dict.fromkeys(keys, 1))
        if self.tiers is not None and self.write_through:
            for key in keys:
                self.tiers.store(key, now)

    def make_room(self, pages: int, now: float) -> None:
        """Evict unreferenced blocks (LRU) until ``pages`` are free or nothing is evictable."""
        pool = self.pool
        if self.tiers is None:
            self._evict_untiered(pages)
            return
        while pool.free < pages and self.lru:
            key, _ = self.lru.popitem(last=False)
            del self.ref[key]
            self.evictable_pages -= self.ppb
            pool.release(self.ppb)
            self.evicted_blocks += 1
            if self.tiers is not None:
                self.tiers.store(key, now)  # write-back on eviction (no-op if already stored)

    def _evict_untiered(self, pages: int) -> None:
        """``make_room`` without offload tiers: the pool's ``release`` of each evicted block
        done inline on local counters (the same arithmetic in the same order, bit for bit),
        written back once."""
        pool, lru, ref, ppb = self.pool, self.lru, self.ref, self.ppb
        free, used, live = pool.free, pool.used, pool.live_runs
        n = 0
        while free < pages and lru:
            key, _ = lru.popitem(last=False)
            del ref[key]
            if ppb > used:
                raise RuntimeError(f"KV pool released {ppb} pages but only {used} are in use")
            if ppb:
                live -= live * ppb / used
            used -= ppb
            free += ppb
            if used == 0:  # as KVPool.release: an empty pool is fresh again
                live = 0.0
                pool.fresh = pool.capacity
            n += 1
        if n:
            pool.free, pool.used, pool.live_runs = free, used, live
            self.evictable_pages -= n * ppb
            self.evicted_blocks += n

    def clear(self) -> None:
        """Forget every block (the instance's HBM is gone): their pages go back to the pool.
        Blocks must be unreferenced (the requests using them were taken off first)."""
        held = sum(1 for r in self.ref.values() if r)
        if held:
            raise RuntimeError(f"prefix cache cleared while {held} blocks are still referenced")
        self.pool.release(len(self.lru) * self.ppb)
        self.ref.clear()
        self.lru.clear()
        self.evictable_pages = 0
