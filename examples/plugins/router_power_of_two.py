"""Power of two choices (Mitzenmacher 2001): sample two instances, send to the less loaded.

Use it from a scenario with ``router: {policy: "examples.plugins.router_power_of_two:PowerOfTwo",
params: {load: requests}}`` and ``pdsim run --allow-plugin examples``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pdsim.sim.control.router import Router


class PowerOfTwo(Router):
    """Two distinct instances drawn with the world's seeded ``self.rng``; the one with less
    load wins (ties: the first drawn). Load: outstanding tokens per GPU, or requests held."""

    @dataclass(frozen=True)
    class Params:
        load: Literal["tokens", "requests"] = "tokens"

    def load_of(self, view) -> float:
        if self.params.load == "requests":
            return view.queue_len + view.running
        return view.outstanding_tokens / view.gpus

    def pick_prefill(self, req, instances):
        if len(instances) == 1:
            return instances[0]
        i, j = self.rng.choice(len(instances), size=2, replace=False)
        a, b = instances[int(i)], instances[int(j)]
        return a if self.load_of(a) <= self.load_of(b) else b

    pick_decode = pick_prefill  # decode instances by the same rule
