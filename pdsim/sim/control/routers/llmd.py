"""llm-d's inference scheduler: weighted scorers and a max-score picker (``llmd``).

Sources: llm-d ``guides/inference-scheduling`` (the default scheduling profile: queue-scorer
weight 2, kv-cache-utilization-scorer weight 2, prefix-cache-scorer weight 3;
https://github.com/llm-d/llm-d/tree/main/guides/inference-scheduling) and the scorers of the
Gateway API Inference Extension that llm-d's endpoint picker runs
(kubernetes-sigs/gateway-api-inference-extension,
``pkg/epp/scheduling/framework/plugins/scorer/queue.go``, ``kvcache_utilization.go``, and the
prefix-cache plug-in).

Each scorer gives every candidate a score in [0, 1] (higher is better); the picker takes the
highest weighted sum (ties at random, with the world's seeded generator):
- prefix-cache: matched prompt blocks / prompt blocks. ``approximate`` (the default plug-in):
  matched against the blocks the scheduler routed to that endpoint, LRU-bounded per server
  (``lru_capacity_blocks``); ``precise`` (llm-d's precise-prefix-cache-scorer fed by KV
  events): matched against the instance's HBM prefix cache;
- queue: (max waiting - waiting) / (max waiting - min waiting) over the candidates, 1 when all
  wait equally (waiting = the instance's queued requests);
- kv-cache-utilization: 1 - the instance's KV pool use.
Decode endpoints (PD mode) are scored by queue and KV utilisation only: pdsim's decode
instances keep no prefix cache.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ....specs._convert import check
from ..router import ROUTERS, Router
from .approx_index import ApproxPrefixIndex


def queue_scores(instances) -> list[float]:
    """GIE queue-scorer: min-max normalised waiting requests, fewer is better."""
    q = [v.queue_len for v in instances]
    lo, hi = min(q), max(q)
    if hi == lo:
        return [1.0] * len(q)
    return [(hi - x) / (hi - lo) for x in q]


def kv_scores(instances) -> list[float]:
    """GIE kv-cache-utilization-scorer: free share of the KV pool."""
    return [1.0 - min(1.0, max(0.0, v.kv_used_frac)) for v in instances]


@ROUTERS.register("llmd")
class LLMD(Router):
    """See the module docstring."""

    @dataclass(frozen=True)
    class Params:
        prefix_weight: float = 3.0
        queue_weight: float = 2.0
        kv_weight: float = 2.0
        prefix_mode: Literal["approximate", "precise"] = "approximate"
        # GIE lruCapacityPerServer 31,250 blocks (of its 16-token default blocks), counted here in
        # the prompt's own blocks: 31,250 x 16 tokens = 977 blocks of 512 tokens
        lru_capacity_blocks: int = 977

        def __post_init__(self) -> None:
            for name in ("prefix_weight", "queue_weight", "kv_weight"):
                check(getattr(self, name) >= 0, "must be >= 0", name)
            check(self.prefix_weight + self.queue_weight + self.kv_weight > 0,
                  "at least one weight must be > 0", "prefix_weight")
            check(self.lru_capacity_blocks >= 1, "must be >= 1", "lru_capacity_blocks")

    def __init__(self, params=None, rng=None):
        super().__init__(params, rng)
        self.index = ApproxPrefixIndex(self.params.lru_capacity_blocks) \
            if self.params.prefix_mode == "approximate" else None

    def prefix_scores(self, req, instances) -> list[float]:
        hids = req.hash_ids
        if hids is None or not len(hids):
            return [0.0] * len(instances)
        if self.index is not None:
            return [self.index.match(v.iid, hids) / len(hids) for v in instances]
        return [v.prefix_match(hids) / len(hids) for v in instances]

    def scores(self, req, instances, with_prefix: bool = True) -> list[float]:
        """Weighted score of each instance (higher is better)."""
        p = self.params
        total = [p.queue_weight * a + p.kv_weight * b for a, b in zip(queue_scores(instances), kv_scores(instances))]
        if with_prefix and p.prefix_weight:
            total = [t + p.prefix_weight * s for t, s in zip(total, self.prefix_scores(req, instances))]
        return total

    def _pick(self, scores: list[float], instances):
        best = max(scores)
        tied = [v for v, s in zip(instances, scores) if s == best]
        return tied[0] if len(tied) == 1 else tied[int(self.rng.integers(len(tied)))]

    def pick_prefill(self, req, instances):
        chosen = self._pick(self.scores(req, instances), instances)
        if self.index is not None and req.hash_ids is not None:
            self.index.insert(chosen.iid, req.hash_ids)
        return chosen

    def pick_decode(self, req, instances):
        return self._pick(self.scores(req, instances, with_prefix=False), instances)
