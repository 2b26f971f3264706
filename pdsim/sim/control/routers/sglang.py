"""SGLang router's cache-aware policy (``sglang_cache_aware``).

Source: sgl-project/sglang, ``sgl-router/src/policies/cache_aware.rs`` (CacheAwarePolicy,
https://github.com/sgl-project/sglang/blob/main/sgl-router/src/policies/cache_aware.rs) and the
router's command-line defaults (``--cache-threshold 0.3 --balance-abs-threshold 64
--balance-rel-threshold 1.5 --eviction-interval 120 --max-tree-size 67108864``).

Per request, over the prefill workers:
1. loads = requests in flight per worker (the router counts what it sent and has not seen
   finish; here: queued + running requests of the instance);
2. if the system is imbalanced, ``max - min > balance_abs_threshold`` **and**
   ``max > min * balance_rel_threshold``, the least loaded worker takes it;
3. otherwise the approximate radix tree (per worker, the prompts routed there) gives the
   worker with the longest matched prefix; if the match rate (matched / prompt) exceeds
   ``cache_threshold`` that worker takes it, else the worker with the smallest tree (the most
   cache room);
4. the prompt is inserted into the chosen worker's tree in both cases.
Trees are trimmed least-recently-used to ``max_tree_blocks`` every ``eviction_interval_s``.

pdsim's version: the tree holds prompt block ids (approx_index.py), so the match rate is
matched blocks / prompt blocks (SGLang: characters of text); the clock is the request's
routing time. A prompt without block ids counts as unique content of ceil(input /
``block_tokens``) blocks. Decode (PD mode): the least loaded decode worker, as SGLang
router's single-policy PD path does (``select_worker_pair``). Ties go to the first registered
worker. Unlike ``cache_aware`` (router.py), this policy never reads the engines' caches.
"""
from __future__ import annotations

from dataclasses import dataclass

from ....specs._convert import check
from ..router import ROUTERS, Router
from .approx_index import ApproxPrefixIndex


def in_flight(v) -> int:
    """Requests an instance holds that are not finished: queued or running."""
    return v.queue_len + v.running


def least_loaded(instances):
    """The instance with the fewest requests in flight (ties: the first)."""
    best, key = None, None
    for v in instances:
        k = in_flight(v)
        if key is None or k < key:
            best, key = v, k
    return best


def prompt_blocks(req, block_tokens: int):
    """The prompt's block ids, or unique stand-ins for a prompt that carries none."""
    if req.hash_ids is not None:
        return req.hash_ids
    n = max(1, -(-req.input_len // block_tokens))
    return [("unique", req.rid, k) for k in range(n)]


@ROUTERS.register("sglang_cache_aware")
class SGLangCacheAware(Router):
    """See the module docstring."""

    @dataclass(frozen=True)
    class Params:
        cache_threshold: float = 0.3  # match rate above which the longest match wins
        balance_abs_threshold: int = 64  # requests: max - min load beyond this ...
        balance_rel_threshold: float = 1.5  # ... and max > min x this: balance instead
        eviction_interval_s: float = 120.0
        # 67,108,864 characters (the CLI default) at ~4 characters per token is ~16.8M tokens,
        # 32,768 blocks of the Mooncake trace's 512 tokens (an assumption: tokens vs characters)
        max_tree_blocks: int = 32768
        block_tokens: int = 512  # block size assumed for prompts without block ids

        def __post_init__(self) -> None:
            check(0.0 <= self.cache_threshold <= 1.0, "must be in [0, 1]", "cache_threshold")
            check(self.balance_abs_threshold >= 0, "must be >= 0", "balance_abs_threshold")
            check(self.balance_rel_threshold >= 1.0, "must be >= 1", "balance_rel_threshold")
            check(self.eviction_interval_s > 0, "must be > 0 seconds", "eviction_interval_s")
            check(self.max_tree_blocks >= 1, "must be >= 1", "max_tree_blocks")
            check(self.block_tokens >= 1, "must be >= 1", "block_tokens")

    def __init__(self, params=None, rng=None):
        super().__init__(params, rng)
        self.tree = ApproxPrefixIndex(self.params.max_tree_blocks)
        self._last_evict = 0.0

    def _maybe_evict(self, now: float) -> None:
        if now - self._last_evict >= self.params.eviction_interval_s:
            self.tree.evict()
            self._last_evict = now

    def imbalanced(self, instances) -> bool:
        loads = [in_flight(v) for v in instances]
        hi, lo = max(loads), min(loads)
        p = self.params
        return hi - lo > p.balance_abs_threshold and hi > lo * p.balance_rel_threshold

    def pick_prefill(self, req, instances):
        p = self.params
        self._maybe_evict(req.routed)
        blocks = prompt_blocks(req, p.block_tokens)
        if self.imbalanced(instances):
            chosen = least_loaded(instances)
        else:
            best, hit = None, -1
            for v in instances:
                m = self.tree.match(v.iid, blocks)
                if m > hit:
                    best, hit = v, m
            if hit / max(1, len(blocks)) > p.cache_threshold:
                chosen = best
            else:
                chosen = min(instances, key=lambda v: self.tree.size(v.iid))  # first on ties
        # periodic, not per-insert, trimming: SGLang evicts on its interval only
        self.tree.insert(chosen.iid, blocks, evict=False)
        return chosen

    def pick_decode(self, req, instances):
        return least_loaded(instances)
