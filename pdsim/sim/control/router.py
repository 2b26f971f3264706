"""The global router: where each request goes, a plug-in kind (``router.policy``).

A router sees read-only views of the live instances (control/membership.py) and answers
each request with a decision:
- ``Route(prefill, decode)``: run it there (colocated clusters: both are the same view);
- ``Hold(retry_after_s)``: keep it at the router and ask again after that many seconds, or
  (None) when the set of live instances changes;
- ``Reject(reason)``: refuse it; it is dropped with reason ``rejected_<reason>``.

Simple policies implement ``pick_prefill`` (and ``pick_decode``); ``route`` builds the
decision from them. Policies with a view of the whole request's path (P and D chosen
together, early rejection) override ``route``.

Built in here: SGLang's mini load balancer pairs one prefill and one decode server per
request (``round_robin`` or ``random``, not load-aware); ``least_loaded`` is the load-aware
alternative (outstanding tokens per GPU); ``cache_aware`` is pdsim's oracle: it reads the
engines' actual prefix caches (longest cached prefix, with a balance threshold), which no
real router can. The published routers (SGLang router's approximate-tree cache-aware policy,
Dynamo's KV router, llm-d, Mooncake's Conductor, vLLM's xPyD proxy) live in
``control/routers/`` (docs/policies.md).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ...plugins import Plugin, Registry


@dataclass(frozen=True)
class Route:
    prefill: object  # an InstanceView
    decode: object


@dataclass(frozen=True)
class Hold:
    retry_after_s: float | None = None  # None: when the live instances change


@dataclass(frozen=True)
class Reject:
    reason: str


class Router(Plugin):
    """Base class. ``rng`` is the world's seeded generator (use it, not global randomness).
    ``scenario``: the scenario spec the world runs (specs.scenario.Scenario: its SLOs, transfer
    block, ...), set by the world before the first request (None outside a world)."""

    scenario = None

    def __init__(self, params=None, rng: np.random.Generator | None = None):
        super().__init__(params)
        self.rng = rng if rng is not None else np.random.default_rng(0)

    def route(self, req, members) -> Route | Hold | Reject:
        """The decision for ``req`` given ``members`` (control/membership.py)."""
        if members.disaggregated:
            ps, ds = members.views("prefill"), members.views("decode")
            if not ps or not ds:
                return Hold()
            return Route(self.pick_prefill(req, ps), self.pick_decode(req, ds))
        cs = members.views("colocated")
        if not cs:
            return Hold()
        inst = self.pick_prefill(req, cs)
        return Route(inst, inst)

    def pick_prefill(self, req, instances: Sequence) -> object:
        raise NotImplementedError

    def pick_decode(self, req, instances: Sequence) -> object:
        return self.pick_prefill(req, instances)


ROUTERS: Registry[Router] = Registry("router", Router)


def _load(v) -> float:
    return v.outstanding_tokens / v.gpus


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
        return min(instances, key=lambda v: (_load(v), v.iid))

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
        load = {v.iid: _load(v) for v in instances}
        floor = min(load.values())
        best, best_key = None, None
        for v in instances:
            if load[v.iid] - floor > self.balance:
                continue
            hit = v.prefix_match(req.hash_ids) if req.hash_ids is not None else 0
            key = (-hit, load[v.iid], v.iid)
            if best_key is None or key < best_key:
                best, best_key = v, key
        return best

    def pick_decode(self, req, instances):
        return min(instances, key=lambda v: (_load(v), v.iid))
