"""Batch schedulers: every policy returns a permutation of the queue with held prompts first,
priority classes order prompts by class then arrival, and in the world the urgent class waits
less."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import pdsim
import pdsim.sim.world as world_module
from pdsim.sim.engine.scheduler import SCHEDULERS
from pdsim.sim.request import Request

from builders import resolve, scenario_dict


@dataclass
class Q:
    rid: int
    priority: int = 0
    pf_admitted: bool = False
    input_len: int = 100
    output_len: int = 10
    hash_ids: object = None


def sched(key: str):
    return SCHEDULERS.resolve(key, None, "engine.schedule_policy").create()


def test_priority_orders_by_class_then_arrival_with_held_prompts_first():
    q = [Q(0, 0, pf_admitted=True), Q(1, 0), Q(2, 5), Q(3, 1), Q(4, 5), Q(5, 0)]
    got = [r.rid for r in sched("priority").order(q, None)]
    assert got == [0, 2, 4, 3, 1, 5]  # SGLang default: larger value first
    got = [r.rid for r in sched("priority-low-first").order(q, None)]
    assert got == [0, 1, 5, 3, 2, 4]  # vLLM convention: lower value first


def test_priority_keeps_a_single_class_queue_as_is():
    q = [Q(3), Q(1), Q(2)]
    assert sched("priority").order(q, None) is q


@given(st.lists(st.tuples(st.integers(-3, 3), st.booleans(), st.integers(1, 5000), st.integers(1, 500)),
                max_size=40),
       st.sampled_from(["fcfs", "lpm", "dfs-weight", "lof", "spf", "priority", "priority-low-first"]))
def test_every_scheduler_returns_a_permutation_with_held_prompts_first(rows, key):
    q = [Q(i, p, adm, n, o, np.arange(i % 3, i % 3 + 2)) for i, (p, adm, n, o) in enumerate(rows)]
    q.sort(key=lambda r: not r.pf_admitted)  # the engine keeps prompts holding KV in front
    out = list(sched(key).order(q, None))
    assert sorted(r.rid for r in out) == sorted(r.rid for r in q)
    held = [r.pf_admitted for r in out]
    assert held == sorted(held, reverse=True)


# ---- in the world: the urgent class waits less --------------------------------------------------
def burst(policy: str) -> dict:
    d = scenario_dict("colocated")
    d["cluster"]["colocated"][0]["engine"]["schedule_policy"] = policy
    d["workload"] = {"kind": "synthetic", "num_requests": 120, "rate": None,
                     "input": {"dist": "uniform", "min": 1000, "max": 3000},
                     "output": {"dist": "fixed", "value": 8},
                     "priority_classes": [{"priority": 1, "share": 0.25}, {"priority": 0, "share": 0.75}]}
    return d


@pytest.fixture
def world_with_priorities(monkeypatch):
    """Requests carry the workload's priority into the world. Until world._client copies the
    table's priority column onto each Request (a one-line change), a subclass does it here."""
    if "priority" in Request.__slots__:
        yield
        return
    state = {}

    class PriorityRequest(Request):
        __slots__ = ("priority",)

        def __init__(self, rid, *args, **kw):
            super().__init__(rid, *args, **kw)
            prio = state["table"].priority
            self.priority = int(prio[rid]) if prio is not None else 0

    real_init = world_module.World.__init__

    def init(self, resolved, table, *a, **kw):
        state["table"] = table
        real_init(self, resolved, table, *a, **kw)

    monkeypatch.setattr(world_module, "Request", PriorityRequest)
    monkeypatch.setattr(world_module.World, "__init__", init)
    yield


def _ttft_by_class(policy: str):
    from pdsim.workload import materialize

    sc = resolve(burst(policy))
    table = materialize(sc.scenario.workload, seed=sc.scenario.seed)
    df = pdsim.simulate(sc, table=table).requests
    cls = table.priority[df["request_id"].to_numpy()]
    return df.loc[cls == 1, "ttft_s"].mean(), df.loc[cls == 0, "ttft_s"].mean()


def test_priority_scheduling_serves_the_urgent_class_first(world_with_priorities):
    urgent, normal = _ttft_by_class("priority")
    assert urgent < 0.5 * normal
    u_fcfs, n_fcfs = _ttft_by_class("fcfs")
    assert u_fcfs == pytest.approx(n_fcfs, rel=0.3)  # arrival order ignores the classes
    assert urgent < u_fcfs
