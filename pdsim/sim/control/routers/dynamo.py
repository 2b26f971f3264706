"""NVIDIA Dynamo's KV-aware router (``dynamo_kv``).

Sources: ai-dynamo/dynamo ``docs/router/README.md`` ("Cost Function",
https://github.com/ai-dynamo/dynamo/blob/main/docs/router/README.md) and
``lib/llm/src/kv_router/scheduler.rs`` (``DefaultWorkerSelector``, ``softmax_sample``).

Per worker, a cost (lower is better) in KV blocks:

    logit = overlap_score_weight x potential_prefill_blocks + potential_active_blocks

- ``potential_prefill_blocks`` = (prompt tokens - overlap blocks x block size) / block size:
  what the worker would have to compute, given the prompt blocks it already caches;
- ``potential_active_blocks`` = the blocks the worker holds for its active requests plus the
  request's own blocks: the decode load it would carry.

``router_temperature`` 0 picks the lowest cost (ties: the smallest cache, then at random);
above 0 the costs are scaled to [0, 1] by their spread and a worker is drawn with
probability proportional to exp(-scaled / temperature) — Dynamo's softmax sampling. Draws use
the world's seeded generator, so a run is reproducible.

pdsim's version: overlap blocks come from the instance's HBM prefix cache (Dynamo's default:
KV events from the engines; with ``offloaded_overlap`` also blocks in its offload tiers, as
Dynamo's KV block manager reports host and disk tiers), or with ``kv_events: false`` from the
router's own routing history (``--no-kv-events``, approx_index.py). Active blocks are the instance's outstanding
tokens (queued prompts + running contexts) / block size. Decode workers (PD mode) are
chosen by the same cost with overlap weight 0 — Dynamo's decode router runs with
``--kv-overlap-score-weight 0`` (pure load balance) in its disaggregated examples.
``block_tokens`` 0 uses the prefix cache's block (the trace's block size), else 64.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ....specs._convert import check
from ..router import ROUTERS, Router
from .approx_index import ApproxPrefixIndex

# tokens per prompt block id when no instance has a prefix cache to say (RequestTable's
# default, the Mooncake trace convention)
HASH_BLOCK_TOKENS = 512


def softmax_pick(costs: list[float], temperature: float, u: float) -> int:
    """Index drawn from ``costs`` (lower is better) by Dynamo's softmax sampling with the
    uniform draw ``u`` in [0, 1): costs scaled by their spread, then exp(-c / temperature)."""
    lo, hi = min(costs), max(costs)
    if hi == lo:
        weights = [1.0] * len(costs)
    else:
        scale = 1.0 / ((hi - lo) * temperature)
        weights = [math.exp(-(c - lo) * scale) for c in costs]
    total = sum(weights)
    acc = 0.0
    for i, w in enumerate(weights):
        acc += w / total
        if u <= acc:
            return i
    return len(costs) - 1


@ROUTERS.register("dynamo_kv")
class DynamoKV(Router):
    """See the module docstring."""

    @dataclass(frozen=True)
    class Params:
        overlap_score_weight: float = 1.0  # --kv-overlap-score-weight
        router_temperature: float = 0.0  # --router-temperature
        kv_events: bool = True  # false: overlap from routing history (--no-kv-events)
        block_tokens: int = 0  # --kv-cache-block-size; 0: the prefix cache's block, else 64
        approx_capacity_blocks: int = 1_000_000  # --no-kv-events: blocks remembered per worker
        offloaded_overlap: bool = False  # KV events also from the offload tiers (host DRAM, disk)

        def __post_init__(self) -> None:
            check(self.overlap_score_weight >= 0, "must be >= 0", "overlap_score_weight")
            check(self.router_temperature >= 0, "must be >= 0", "router_temperature")
            check(self.block_tokens >= 0, "must be >= 0", "block_tokens")
            check(self.approx_capacity_blocks >= 1, "must be >= 1", "approx_capacity_blocks")

    def __init__(self, params=None, rng=None):
        super().__init__(params, rng)
        self.approx = None if self.params.kv_events else ApproxPrefixIndex(self.params.approx_capacity_blocks)

    def _block(self, instances) -> int:
        if self.params.block_tokens:
            return self.params.block_tokens
        for v in instances:
            if v.block_tokens:
                return v.block_tokens
        return 64

    def _overlap(self, v, req) -> int:
        if req.hash_ids is None:
            return 0
        if self.approx is not None:
            return self.approx.match(v.iid, req.hash_ids)
        if self.params.offloaded_overlap:
            return v.offload_match(req.hash_ids)
        return v.prefix_match(req.hash_ids)

    def costs(self, req, instances, weight: float) -> list[float]:
        """Each instance's logit for ``req`` (blocks; see the module docstring)."""
        block = self._block(instances)
        req_blocks = req.input_len / block
        out = []
        for v in instances:
            # overlap blocks are counted in the cache's blocks (the prompt's hash blocks); the
            # tokens they spare are converted to the router's block size
            hit_tokens = min(req.input_len, self._overlap(v, req) * (v.block_tokens or HASH_BLOCK_TOKENS)) \
                if weight else 0
            prefill_blocks = (req.input_len - hit_tokens) / block
            active_blocks = v.outstanding_tokens / block + req_blocks
            out.append(weight * prefill_blocks + active_blocks)
        return out

    def _choose(self, req, instances, weight: float):
        costs = self.costs(req, instances, weight)
        t = self.params.router_temperature
        if t > 0:
            return instances[softmax_pick(costs, t, float(self.rng.random()))]
        best = min(costs)
        tied = [v for v, c in zip(instances, costs) if c == best]
        if len(tied) > 1:
            # Dynamo breaks ties by the smaller cache tree, then at random
            sizes = [v.kv_used_frac for v in tied]
            small = min(sizes)
            tied = [v for v, s in zip(tied, sizes) if s == small]
            if len(tied) > 1:
                return tied[int(self.rng.integers(len(tied)))]
        return tied[0]

    def pick_prefill(self, req, instances):
        chosen = self._choose(req, instances, self.params.overlap_score_weight)
        if self.approx is not None and req.hash_ids is not None:
            self.approx.insert(chosen.iid, req.hash_ids)
        return chosen

    def pick_decode(self, req, instances):
        return self._choose(req, instances, 0.0)
