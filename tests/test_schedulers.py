"""Batch schedulers: every policy returns a permutation of the queue with held prompts first,
priority classes order prompts by class then arrival, and in the world the urgent class waits
less; the chunk-size and retraction hooks decide in the world, with parameters from YAML."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import pdsim
from pdsim.sim.engine.scheduler import SCHEDULERS, BatchScheduler
from pdsim.specs.errors import SpecError

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


def _ttft_by_class(policy: str):
    from pdsim.workload import materialize

    sc = resolve(burst(policy))
    table = materialize(sc.scenario.workload, seed=sc.scenario.seed)
    df = pdsim.simulate(sc, table=table).requests
    cls = df["priority"].to_numpy()  # the record carries each request's class
    assert np.array_equal(cls, table.priority[df["request_id"].to_numpy()])
    return df.loc[cls == 1, "ttft_s"].mean(), df.loc[cls == 0, "ttft_s"].mean()


def test_priority_scheduling_serves_the_urgent_class_first():
    urgent, normal = _ttft_by_class("priority")
    assert urgent < 0.5 * normal
    u_fcfs, n_fcfs = _ttft_by_class("fcfs")
    assert u_fcfs == pytest.approx(n_fcfs, rel=0.3)  # arrival order ignores the classes
    assert urgent < u_fcfs


# ---- the chunk-size and retraction hooks ------------------------------------------------------
class SmallChunksWhileDecoding(BatchScheduler):
    """Halve the prefill chunk while requests decode (an ITL-protecting chunk policy)."""

    @dataclass(frozen=True)
    class Params:
        divisor: int = 2

    calls = 0

    def chunk_tokens(self, rank_budget, queue, running):
        SmallChunksWhileDecoding.calls += 1
        return rank_budget // self.params.divisor if running else rank_budget


class RetractOldest(BatchScheduler):
    victims: list = []

    def retract_victim(self, running):
        req = running[next(iter(running))]
        RetractOldest.victims.append((req.rid, list(running)))
        return req


def _register(monkeypatch, key, cls):
    monkeypatch.setitem(SCHEDULERS._items, key, cls)


def _mixed(policy: str, params: dict | None = None) -> dict:
    d = scenario_dict("colocated")
    eng = d["cluster"]["colocated"][0]["engine"]
    eng.update(schedule_policy=policy, enable_mixed_chunk=True, chunked_prefill_size=4096)
    if params is not None:
        eng["schedule_params"] = params
    d["workload"] = {"kind": "synthetic", "num_requests": 80, "rate": 20.0,
                     "input": {"dist": "uniform", "min": 2000, "max": 6000},
                     "output": {"dist": "uniform", "min": 50, "max": 200}}
    return d


def test_chunk_policy_sets_the_prefill_budget_and_its_params_come_from_yaml(monkeypatch):
    _register(monkeypatch, "small-chunks", SmallChunksWhileDecoding)
    SmallChunksWhileDecoding.calls = 0
    base = pdsim.simulate(resolve(_mixed("fcfs")))
    small = pdsim.simulate(resolve(_mixed("small-chunks", {"divisor": 4})))
    assert SmallChunksWhileDecoding.calls > 0
    t0, t1 = base.timeline, small.timeline
    busy0 = t0.loc[(t0["kind"] == "instance") & (t0["running_batch"] > 0), "prefill_tokens"]
    busy1 = t1.loc[(t1["kind"] == "instance") & (t1["running_batch"] > 0), "prefill_tokens"]
    assert busy0.max() > 1024 and busy1.max() <= 4096 // 4  # the policy's chunk while decoding
    # smaller chunks in mixed steps: shorter steps for the decoding requests, later first tokens
    assert small.summary()["mean_itl_ms"] < base.summary()["mean_itl_ms"]
    assert small.summary()["mean_ttft_ms"] > base.summary()["mean_ttft_ms"]


def test_schedule_params_are_typed_and_checked_at_load(monkeypatch):
    _register(monkeypatch, "small-chunks", SmallChunksWhileDecoding)
    with pytest.raises(SpecError, match=r"cluster.colocated\[0\].engine.schedule_params"):
        resolve(_mixed("small-chunks", {"divisr": 4}))


def test_a_chunk_policy_outside_the_engine_budget_is_an_error(monkeypatch):
    class TooBig(BatchScheduler):
        def chunk_tokens(self, rank_budget, queue, running):
            return rank_budget + 1

    _register(monkeypatch, "too-big", TooBig)
    with pytest.raises(RuntimeError, match="chunk_tokens returned"):
        pdsim.simulate(resolve(_mixed("too-big")))


def test_retraction_policy_picks_the_victim(monkeypatch):
    _register(monkeypatch, "retract-oldest", RetractOldest)
    RetractOldest.victims = []
    d = _mixed("retract-oldest")
    d["cluster"]["colocated"][0]["engine"].update(max_total_tokens=12000, min_kv_reserve_tokens=512)
    d["workload"]["input"] = {"dist": "uniform", "min": 1000, "max": 3000}
    d["workload"]["output"] = {"dist": "uniform", "min": 400, "max": 800}
    res = pdsim.simulate(resolve(d))
    assert RetractOldest.victims, "the pool never ran out: no retraction to decide"
    assert all(rid == running[0] for rid, running in RetractOldest.victims)  # the oldest admitted
    assert res.requests["preemptions"].sum() == len(RetractOldest.victims)
    assert res.summary()["completed"] + res.summary()["dropped"] == 80
