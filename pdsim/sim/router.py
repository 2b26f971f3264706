"""Routers: pick the prefill and the decode instance of each request.

SGLang's mini load balancer pairs one prefill and one decode server per request (round robin
or random, not load-aware); ``least_loaded`` is the load-aware alternative (outstanding
tokens). Colocated clusters use ``pick_prefill`` alone. Plug in research policies with
``package.module:ClassName`` (subclass :class:`Router`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..plugins import Plugin, Registry
from .request import Request


class Router(Plugin):
    """Base class. ``rng`` is the world's seeded generator (use it, not global randomness).
    Parameters: a frozen dataclass ``Params`` (see pdsim/plugins.py)."""

    def __init__(self, params=None, rng: np.random.Generator | None = None):
        super().__init__(params)
        self.rng = rng if rng is not None else np.random.default_rng(0)

    def pick_prefill(self, req: Request, instances: Sequence) -> object:
        raise NotImplementedError

    def pick_decode(self, req: Request, instances: Sequence) -> object:
        return self.pick_prefill(req, instances)


ROUTERS: Registry[Router] = Registry("router", Router)


@ROUTERS.register("round_robin")
class RoundRobin(Router):
    def __init__(self, params=None, rng=None):
        super().__init__(params, rng)
        self._p = 0
        self._d = 0

    def pick_prefill(self, req, instances):
        inst = instances[self._p % len(instances)]
        self._p += 1
        return inst

    def pick_decode(self, req, instances):
        inst = instances[self._d % len(instances)]
        self._d += 1
        return inst


@ROUTERS.register("random")
class RandomRouter(Router):
    def pick_prefill(self, req, instances):
        return instances[int(self.rng.integers(len(instances)))]

    pick_decode = pick_prefill


@ROUTERS.register("least_loaded")
class LeastLoaded(Router):
    """Fewest outstanding tokens per GPU (ties: lowest index)."""

    def pick_prefill(self, req, instances):
        return min(instances, key=lambda i: (i.outstanding_tokens / i.gpus, i.iid))

    pick_decode = pick_prefill


@ROUTERS.register("cache_aware")
class CacheAware(Router):
    """Prefill: the instance whose HBM prefix cache holds the longest prefix of the prompt
    (ties and cache-less instances: fewest outstanding tokens per GPU); decode: least loaded.
    ``balance_tokens``: skip an instance whose outstanding prompt tokens per GPU exceed the
    least loaded one's by more than this (SGLang router's cache-aware balance threshold)."""

    @dataclass(frozen=True)
    class Params:
        balance_tokens: float = 32768.0  # outstanding prompt tokens per GPU above the least loaded

    def __init__(self, params=None, rng=None):
        super().__init__(params, rng)
        self.balance = self.params.balance_tokens

    def pick_prefill(self, req, instances):
        load = {i.iid: i.outstanding_tokens / i.gpus for i in instances}
        floor = min(load.values())
        best, best_key = None, None
        for inst in instances:
            if load[inst.iid] - floor > self.balance:
                continue
            cache = inst.cache
            hit = 0
            if cache is not None and req.hash_ids is not None:
                hit = cache.match(req.hash_ids, len(req.hash_ids))
            key = (-hit, load[inst.iid], inst.iid)
            if best_key is None or key < best_key:
                best, best_key = inst, key
        return best

    def pick_decode(self, req, instances):
        return min(instances, key=lambda i: (i.outstanding_tokens / i.gpus, i.iid))
