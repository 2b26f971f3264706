"""Shortest uncached prompt first: a cache-aware shortest-job-first batch scheduler.

A waiting prompt's work is its tokens not already in this instance's prefix cache; the least
work goes first (ties: arrival). Beyond ``max_queue`` waiting prompts it keeps arrival order
(sorting a long queue every step costs more than it saves, as SGLang's LPM does at 128).
Use it with ``engine: {schedule_policy: "examples.plugins.scheduler_shortest_uncached:ShortestUncachedFirst"}``
and ``pdsim run --allow-plugin examples``.
"""
from __future__ import annotations

from dataclasses import dataclass

from pdsim.sim.engine.scheduler import BatchScheduler


class ShortestUncachedFirst(BatchScheduler):
    @dataclass(frozen=True)
    class Params:
        max_queue: int = 256

    def order(self, queue, cache):
        if len(queue) < 2 or len(queue) > self.params.max_queue:
            return queue  # as is: one prompt, or too many to sort every step
        held = [r for r in queue if r.pf_admitted]  # prompts holding KV always stay in front

        def work(r):
            hit = cache.match(r.hash_ids, len(r.hash_ids)) * cache.block_tokens \
                if cache is not None and r.hash_ids is not None else 0
            return (r.input_len - min(hit, r.input_len), r.rid)

        return held + sorted((r for r in queue if not r.pf_admitted), key=work)
