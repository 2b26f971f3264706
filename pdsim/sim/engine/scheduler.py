"""Batch schedulers: the order in which an instance's waiting prompts are considered for
prefill (SGLang ``--schedule-policy``), a plug-in kind (``engine.schedule_policy``).

The engine walks one DP rank's queue in the order ``order`` returns and admits prompts until
the step's token budget, the running-request cap or the KV pool stops it (FCFS semantics:
the first prompt that does not fit blocks the ones behind it, as SGLang's PrefillAdder does).
Prompts already admitted (holding KV, e.g. a chunked prompt in progress) always come first: a
prompt holding pages must not wait behind one waiting for pages.

Built in (SGLang names):
- ``fcfs``: arrival order (the queue as is; no copy).
- ``lpm``: longest prefix match first — prompts sharing the most cached prefix blocks with
  this instance's prefix cache go first (SGLang falls back to FCFS beyond 128 waiting
  requests, ``lpm_max_queue``).
- ``dfs-weight``: prompts grouped by their first prefix block, heavier groups (more waiting
  prompts sharing it) first, arrival order inside a group — SGLang's depth-first walk of the
  radix tree weighted by waiting requests, approximated at the first-block level.
- ``lof``: longest output first; ``spf``: shortest prompt first (research baselines).
- ``priority``: priority classes (SGLang ``--enable-priority-scheduling``): prompts of the
  most urgent class first, arrival order within a class. SGLang's default treats larger
  ``priority`` values as more urgent; ``priority-low-first`` is the reverse
  (``--schedule-low-priority-values-first``, and vLLM's convention: lower means earlier).
  A request's class is its ``priority`` (the workload's priority column; 0 when absent).
  SGLang's preemption of running requests by more urgent waiting ones is not modelled.

Two more decisions are hooks of the same plug-in (defaults reproduce SGLang):
- ``chunk_tokens(rank_budget, queue, running)``: the prefill token budget of one DP rank this
  step (default: the engine's ``chunked_prefill_size`` share, ``rank_budget``); a chunk-size
  policy (e.g. smaller chunks while many requests decode, to keep ITL down) overrides it;
- ``retract_victim(running)``: which running request loses its KV when a decode step needs
  pages the pool does not have (default: the most recently admitted, SGLang's retraction).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterable

from ...plugins import Plugin, Registry


class BatchScheduler(Plugin):
    """Orders one DP rank's waiting prompts for prefill. ``order`` must return every request of
    ``queue`` exactly once; it may return ``queue`` itself (no copy) when it keeps its order."""

    def order(self, queue, cache) -> Iterable:
        return queue

    def chunk_tokens(self, rank_budget: int, queue, running: int) -> int:
        """Prefill tokens one DP rank may schedule this step (>= 0); ``queue``: its waiting
        prompts, ``running``: requests in the instance's decode batch."""
        return rank_budget

    def retract_victim(self, running: dict):
        """The request to retract from ``running`` (request id -> request, oldest admission
        first); called while a decode step lacks pages."""
        return running[next(reversed(running))]

    def hooks(self) -> tuple[bool, bool]:
        """Whether this class overrides (chunk_tokens, retract_victim): the engine skips the
        calls otherwise (they run every step)."""
        cls = type(self)
        return (cls.chunk_tokens is not BatchScheduler.chunk_tokens,
                cls.retract_victim is not BatchScheduler.retract_victim)


SCHEDULERS: Registry[BatchScheduler] = Registry("batch scheduler", BatchScheduler)


def _admitted_first(queue, key) -> list:
    held = [r for r in queue if r.pf_admitted]
    rest = [r for r in queue if not r.pf_admitted]
    rest.sort(key=key)
    return held + rest


@SCHEDULERS.register("fcfs")
class FCFS(BatchScheduler):
    pass


@SCHEDULERS.register("lpm")
class LongestPrefixMatch(BatchScheduler):
    @dataclass(frozen=True)
    class Params:
        max_queue: int = 128  # SGLang: beyond this many waiting requests, LPM falls back to FCFS

    def order(self, queue, cache):
        if cache is None or len(queue) > self.params.max_queue or len(queue) < 2:
            return queue

        def key(r):
            keys = r.hash_ids
            return (-cache.match(keys, len(keys)) if keys is not None else 0, r.rid)
        return _admitted_first(queue, key)


@SCHEDULERS.register("dfs-weight")
class DFSWeight(BatchScheduler):
    def order(self, queue, cache):
        if len(queue) < 2:
            return queue

        def root(r):
            return r.hash_ids[0] if r.hash_ids is not None and len(r.hash_ids) else ("rid", r.rid)
        weight = Counter(root(r) for r in queue if not r.pf_admitted)
        return _admitted_first(queue, lambda r: (-weight[root(r)], r.rid))


@SCHEDULERS.register("lof")
class LongestOutputFirst(BatchScheduler):
    def order(self, queue, cache):
        return queue if len(queue) < 2 else _admitted_first(queue, lambda r: (-r.output_len, r.rid))


@SCHEDULERS.register("spf")
class ShortestPromptFirst(BatchScheduler):
    def order(self, queue, cache):
        return queue if len(queue) < 2 else _admitted_first(queue, lambda r: (r.input_len, r.rid))


def priority_of(req) -> int:
    """A request's priority class (0 when the workload gives none)."""
    return getattr(req, "priority", 0)


@SCHEDULERS.register("priority")
class PriorityClasses(BatchScheduler):
    @dataclass(frozen=True)
    class Params:
        low_values_first: bool = False  # SGLang default: larger values are more urgent

    def order(self, queue, cache):
        if len(queue) < 2:
            return queue
        first = priority_of(queue[0])
        if all(priority_of(r) == first for r in queue):
            return queue  # one class: FCFS, no copy
        sign = 1 if self.params.low_values_first else -1
        return _admitted_first(queue, lambda r: (sign * priority_of(r), r.rid))


@SCHEDULERS.register("priority-low-first")
class PriorityLowFirst(PriorityClasses):
    @dataclass(frozen=True)
    class Params:
        low_values_first: bool = True  # vLLM's convention / SGLang --schedule-low-priority-values-first
