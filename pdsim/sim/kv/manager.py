"""The KV manager of one instance: its paged pool, prefix cache and offload tiers composed
for prompt admission (SGLang radix cache + LMCache-style tiers).

Admission of a prompt about to start prefill: reuse the cached prefix blocks resident in HBM,
allocate the rest of its pages (evicting unreferenced cached blocks first), and for blocks
found in an offload tier either load them (occupying the tiers and PCIe) or recompute them,
whichever ``load_policy`` picks (``cheaper`` compares the load time with the price of
prefilling those tokens). A decode-capable instance keeps a reserve for its running batch's
growth (the caller passes it as ``headroom_pages``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Hashable, Sequence

from .pool import KVPool, pages_for
from .prefix_cache import PrefixCache
from .tiers import Tier


@dataclass
class PromptGrant:
    """What admission gave a prompt: pages it owns, tokens already there (HBM hits and tier
    loads), and the seconds its tier loads hold the engine."""

    private_pages: int
    cached_tokens: int
    load_s: float
    loaded_tokens: int
    remote_loads: int = 0  # fabric flows from remote storage still bringing blocks in


class KVManager:
    __slots__ = ("pool", "page", "cache", "load_policy")

    def __init__(self, pool: KVPool, cache: PrefixCache | None = None, load_policy: str = "cheaper"):
        self.pool = pool
        self.page = pool.page_size
        self.cache = cache
        self.load_policy = load_policy

    def admit_prompt(self, req, plen: int, recompute: bool, headroom_pages: int, now: float,
                     recompute_price: Callable[[int, int], float], reserve_tokens: int = 0,
                     on_remote: Callable[[], None] | None = None) -> PromptGrant | None:
        """Allocate KV for ``plen`` prompt tokens of ``req``; None when the pool has no room yet
        (the queue waits, FCFS). ``recompute``: the prompt is a context re-prefilled after a
        retraction or a lost transfer (no prefix reuse). ``recompute_price(tokens, cached)``:
        seconds to prefill ``tokens`` after ``cached`` tokens (for the load-or-recompute choice).
        ``reserve_tokens``: growth allocated with the prompt (speculative decoding's output).
        ``on_remote()``: called when a load from remote storage (a fabric flow) completes."""
        cache = self.cache
        m = 0
        pinned = 0  # pages of the matched blocks that are evictable now (a hit makes them not)
        found: Sequence[tuple[Hashable, Tier]] = ()  # blocks found below HBM (tiers.lookup's list)
        keys = req.hash_ids
        use_cache = cache is not None and keys is not None and len(keys) and not recompute
        if use_cache:
            limit = min(len(keys), (plen - 1) // cache.block_tokens)  # at least one token is computed for logits
            m, pinned = cache.match_evictable(keys, limit)
        shared = m * cache.ppb if m else 0
        private = pages_for(plen + reserve_tokens, self.page) - shared
        avail = self.pool.free - headroom_pages
        if cache is not None:
            avail += cache.evictable_pages - pinned
        if avail < private:
            return None
        if m:
            req.cache_keys = cache.acquire(list(keys[:m]))  # a prefix_cache.Hold
            req.shared_pages = shared
        if cache is not None and self.pool.free < private:
            cache.make_room(private, now)
        if not self.pool.alloc(private):  # pragma: no cover - guarded by `avail` above
            raise RuntimeError("KV pool accounting broke: admission check passed but allocation failed")
        # the prompt's runs: its own pages plus, when a cached prefix is reused, that prefix
        # (assumed one run: adopted blocks come from one earlier prompt's allocation)
        req.p_runs = self.pool.last_runs + (1 if shared else 0)
        if use_cache and cache.tiers is not None and m < limit:
            # looked up only now: make_room above may have spilled blocks that evicted others
            found = cache.tiers.lookup(keys, m, limit)
        cached = 0
        load_s = 0.0
        loaded = 0
        if cache is not None and not recompute:
            B = cache.block_tokens
            cached = m * B
            cache.lookup_tokens += plen
            cache.hit_tokens += cached
            if found:
                k_tok = len(found) * B
                est = cache.tiers.estimate_load(found, now)
                pol = self.load_policy
                if pol == "load" or (pol == "cheaper" and est < recompute_price(k_tok, cached)):
                    load_s, remote = cache.tiers.load(found, now, on_remote)
                    loaded = k_tok
                    cached += k_tok
                    return PromptGrant(private, cached, load_s, loaded, remote)
        return PromptGrant(private, cached, load_s, loaded)

    def adopt_blocks(self, req, now: float, tokens: int | None = None) -> int:
        """The prompt's full blocks join the prefix cache (shared from now on): all of them after
        its prefill, or those within its first ``tokens`` tokens while it is still prefilled in
        chunks (engine.prefix_share). Returns the pages that stopped being the request's own."""
        cache = self.cache
        keys = req.hash_ids
        n_full = min(len(keys), (req.input_len if tokens is None else min(tokens, req.input_len))
                     // cache.block_tokens)
        held = req.cache_keys or None  # its prefix_cache.Hold (always true), else None
        have = held.blocks() if held is not None else 0
        if have >= n_full:
            return 0
        # a key already cached (the request's own prefix, another request's block, or a repeat
        # within this prompt) stays private: the blocks adopted are the first occurrences of
        # the keys not cached yet, in prompt order
        span = cache.new_span()
        fresh = dict.fromkeys(keys[have:n_full], span)  # first occurrences, in prompt order
        if cache.ref.keys().isdisjoint(fresh):  # the common case, checked without a Python loop
            new = fresh
        else:
            new = {k: span for k in fresh if k not in cache.ref}
        if not new:
            return 0
        req.cache_keys = cache.adopt_new(held, span, new, now)
        moved = len(new) * cache.ppb
        req.shared_pages += moved
        return moved

    def unref(self, req) -> None:
        """Drop the request's references to cached blocks (they stay cached, evictable)."""
        if req.cache_keys:
            self.cache.release(req.cache_keys)
            req.cache_keys = []
            req.shared_pages = 0

