"""Routers: pick the prefill and the decode instance of each request.

SGLang's mini load balancer pairs one prefill and one decode server per request (round robin
or random, not load-aware); ``least_loaded`` is the load-aware alternative (outstanding
tokens). Colocated clusters use ``pick_prefill`` alone. Plug in research policies with
``package.module:ClassName`` (subclass :class:`Router`).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..registry import Registry
from .request import Request

ROUTERS: Registry["Router"] = Registry("router")


class Router:
    """Base class. ``rng`` is the world's seeded generator (use it, not global randomness)."""

    def __init__(self, rng: np.random.Generator, **params):
        self.rng = rng
        if params:
            raise TypeError(f"unexpected parameters {sorted(params)}")

    def pick_prefill(self, req: Request, instances: Sequence) -> object:
        raise NotImplementedError

    def pick_decode(self, req: Request, instances: Sequence) -> object:
        return self.pick_prefill(req, instances)


@ROUTERS.register("round_robin")
class RoundRobin(Router):
    def __init__(self, rng, **params):
        super().__init__(rng, **params)
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
