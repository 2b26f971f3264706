"""Prompt KV on a prefill-capable instance: allocation at admission, prefix-cache reuse,
loads from offload tiers (or recompute, whichever the policy picks), and handing the
prompt's full blocks to the prefix cache once prefilled. Mixed into ``Instance``.
"""
from __future__ import annotations

import math

from .kvpool import pages_for
from .request import Request


class PromptKV:
    """Mixin: needs ``pool``, ``page``, ``cache``, ``cost``, ``role``, ``env``,
    ``recompute_ctx``, ``load_policy``, ``load_until``, ``pq_tokens``."""

    def _admit_prompt(self, req: Request) -> bool:
        """Allocate KV for a prompt about to start prefill, reusing cached prefix blocks and
        loading lower-tier hits (or recomputing them, whichever the policy picks). False when
        the pool has no room yet (FCFS: the queue waits)."""
        plen = self._prompt_len(req)
        cache = self.cache
        now = self.env.now
        m = 0
        found = ()
        keys = req.hash_ids
        if cache is not None and keys is not None and len(keys) and req.rid not in self.recompute_ctx:
            B = cache.block_tokens
            limit = min(len(keys), (plen - 1) // B)  # at least one token is computed for logits
            m = cache.match(keys, limit)
        shared = m * cache.ppb if m else 0
        private = pages_for(plen, self.page) - shared
        # decode-capable instances keep a page of growth per running request on top of the
        # reserve; without it a retracted request re-admitted at once is retracted again
        avail = self.pool.free - (self._reserve_pages() + self.n_run if self.role != "prefill" else 0)
        if cache is not None:
            avail += cache.evictable_pages - (cache.evictable_among(keys[:m]) if m else 0)
        if avail < private:
            return False
        if m:
            head = [k for k in keys[:m]]
            cache.acquire(head)
            req.cache_keys = head
            req.shared_pages = shared
        if cache is not None and self.pool.free < private:
            cache.make_room(private, now)
        if not self.pool.alloc(private):  # pragma: no cover - guarded by `avail` above
            raise RuntimeError("KV pool accounting broke: admission check passed but allocation failed")
        if self.role == "prefill":
            req.p_pages = private
        else:
            req.d_pages = private
        if cache is not None and keys is not None and len(keys) and req.rid not in self.recompute_ctx:
            B = cache.block_tokens
            limit = min(len(keys), (plen - 1) // B)
            if cache.tiers is not None and m < limit:
                # looked up only now: make_room above may have spilled blocks that evicted others
                found = cache.tiers.lookup(keys, m, limit)
        if cache is not None and req.rid not in self.recompute_ctx:
            B = cache.block_tokens
            cached = m * B
            cache.lookup_tokens += plen
            cache.hit_tokens += cached
            if found:
                k_tok = len(found) * B
                load_s = cache.tiers.estimate_load(found, now)
                pol = self.load_policy
                if pol == "load" or (pol == "cheaper" and
                                     load_s < self.cost.step_time(k_tok, k_tok * (cached + k_tok / 2.0), 1, 0, 0)):
                    load_s = cache.tiers.load(found, now)
                    req.kv_load_s += load_s
                    req.loaded_tokens = k_tok
                    cached += k_tok
                    if now + load_s > self.load_until:
                        self.load_until = now + load_s
            req.cached_tokens = cached
            req.prefilled = cached
            self.pq_tokens -= cached
        if math.isnan(req.prefill_start):
            req.prefill_start = now
        req.pf_admitted = True
        return True

    def _adopt_blocks(self, req: Request) -> None:
        """After prefill, the prompt's full blocks join the prefix cache (shared from now on)."""
        cache = self.cache
        keys = req.hash_ids
        n_full = min(len(keys), req.input_len // cache.block_tokens)
        now = self.env.now
        have = set(req.cache_keys)
        for j in range(len(req.cache_keys), n_full):
            k = keys[j]
            if k in have or not cache.adopt(k, now):
                continue
            req.cache_keys.append(k)
            req.shared_pages += cache.ppb
            if self.role == "prefill":
                req.p_pages -= cache.ppb
            else:
                req.d_pages -= cache.ppb

    def _unref(self, req: Request) -> None:
        if req.cache_keys:
            self.cache.release(req.cache_keys)
            req.cache_keys = []
            req.shared_pages = 0
