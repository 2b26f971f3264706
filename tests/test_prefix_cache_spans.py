"""The prefix cache keeps its LRU in spans (kv/prefix_cache.py); it must behave exactly as a
per-block LRU with per-block reference counts: the same blocks cached, evicted in the same
order, and the pool's counters (live runs included) equal bit for bit."""
from __future__ import annotations

import random
from collections import OrderedDict

import pytest

from pdsim.sim.kv.pool import KVPool
from pdsim.sim.kv.prefix_cache import PrefixCache

PPB = 2


class PerBlock:
    """The reference: one reference count and one LRU entry per block, one pool release each."""

    def __init__(self, pool: KVPool):
        self.pool = pool
        self.ref: dict[int, int] = {}
        self.lru: OrderedDict[int, None] = OrderedDict()
        self.evictable_pages = 0

    def acquire(self, keys):
        for k in keys:
            if self.ref[k] == 0:
                del self.lru[k]
                self.evictable_pages -= PPB
            self.ref[k] += 1

    def adopt(self, keys):
        for k in keys:
            self.ref[k] = 1

    def release(self, keys):
        for k in keys:
            self.ref[k] -= 1
            if self.ref[k] == 0:
                self.lru[k] = None
                self.evictable_pages += PPB

    def make_room(self, pages):
        evicted = []
        while self.pool.free < pages and self.lru:
            k, _ = self.lru.popitem(last=False)
            del self.ref[k]
            self.evictable_pages -= PPB
            self.pool.release(PPB)
            evicted.append(k)
        return evicted


class Tiers:
    """Records the write-backs of evicted blocks (the tiered eviction path)."""

    def __init__(self):
        self.stored = []

    def store(self, key, now):
        self.stored.append(key)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("tiered", [False, True])
def test_spans_match_a_per_block_lru(seed, tiered):
    rng = random.Random(seed)
    pools = [KVPool(4000, 1), KVPool(4000, 1)]
    for p in pools:
        p.alloc(300)  # pages in use beyond the cache: its evictions never empty the pool
    tiers = Tiers() if tiered else None
    cache = PrefixCache(pools[0], PPB, PPB, tiers, False)
    ref = PerBlock(pools[1])
    holds: dict[int, tuple[object, list]] = {}  # request -> (its hold, its keys in order)
    next_key = 0
    for rid in range(400):
        op = rng.random()
        if op < 0.55:  # a request: a prefix hit on cached blocks (some twice), then its own blocks
            cached = list(ref.ref)
            head = [rng.choice(cached) for _ in range(rng.randint(0, 4))] if cached else []
            head = [k for k in head if k in cache.ref]
            assert cache.evictable_among(head) == sum(PPB for k in head if ref.ref[k] == 0)
            # admission's one pass: the cached prefix (all of head, then an uncached key) and its pages
            assert cache.match_evictable(head + [-1], len(head) + 1) == (len(head), cache.evictable_among(head))
            hold = cache.acquire(head) if head else None
            ref.acquire(head)
            own = list(range(next_key, next_key + rng.randint(0, 6)))
            next_key += len(own)
            if own:
                for p in pools:
                    p.alloc(len(own) * PPB)
                span = cache.new_span()
                hold = cache.adopt_new(hold, span, dict.fromkeys(own, span), 0.0)
                ref.adopt(own)
            if hold is not None:
                holds[rid] = (hold, head + own)
        elif op < 0.85 and holds:  # one finishes
            rid_done = rng.choice(sorted(holds))
            hold, keys = holds.pop(rid_done)
            cache.release(hold)
            ref.release(keys)
        else:  # the pool needs room
            want = pools[1].free + rng.randint(1, 20)
            before = list(tiers.stored) if tiers else None
            cache.make_room(want, 0.0)
            evicted = ref.make_room(want)
            if tiers is not None:
                assert tiers.stored[len(before):] == evicted
        assert set(cache.ref) == set(ref.ref)
        assert cache.evictable_pages == ref.evictable_pages
        a, b = pools
        assert (a.used, a.free, a.fresh, a.live_runs) == (b.used, b.free, b.fresh, b.live_runs)
