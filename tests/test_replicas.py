"""Replicas (sim/replicas.py): a scenario of ``replicas.count`` independent copies of its cluster.

The merged record must not depend on the number of worker processes, must hold every request
once with its global id, and each replica's rows must be exactly those of a standalone world run
on that replica's requests with that replica's seed."""
from __future__ import annotations


import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from golden.cases import _small
from builders import assert_same_requests, resolve
from pdsim import api
from pdsim.sim import replicas
from pdsim.sim.world import World
from pdsim.specs.errors import SpecError
from pdsim.workload import materialize


def _scenario(count: int, split: str = "round_robin", n: int = 120, **over) -> dict:
    d = _small("disagg", **over)
    d["workload"]["num_requests"] = n
    d["workload"]["rate"] = 30.0
    d["replicas"] = {"count": count, "split": split}
    return d


def test_workers_do_not_change_the_result():
    rs = resolve(_scenario(3))
    one = api.simulate(rs, workers=1)
    two = api.simulate(rs, workers=2)
    assert_same_requests(one.record, two.record)
    s1, s2 = one.summary(), two.summary()
    for k in s1:
        if k not in ("wall_s",):
            assert s1[k] == s2[k] or (isinstance(s1[k], float) and np.isnan(s1[k]) and np.isnan(s2[k])), k
    assert one.record.meta["replicas"] == 3


def test_each_replica_is_its_own_world():
    rs = resolve(_scenario(3))
    table = materialize(rs.scenario.workload, rs.scenario.seed, rs.base_dir)
    merged = api.simulate(rs).record
    parts = replicas.split(table, rs.scenario.replicas, rs.scenario.seed)
    per = len(merged.instances) // 3
    assert [i.name for i in merged.instances[:per]] == ["r0." + i.name for i in
                                                        World(replicas.replica_scenario(rs, 0),
                                                              replicas.sub_table(table, parts[0])).run().instances]
    for k, idx in enumerate(parts):
        alone = World(replicas.replica_scenario(rs, k), replicas.sub_table(table, idx)).run()
        for col, v in alone.requests.items():
            got = merged.requests[col][idx]
            if col == "request_id":
                assert np.array_equal(got, idx)
            elif col in ("prefill_instance", "decode_instance"):
                assert np.array_equal(got, np.where(v >= 0, v + k * per, v))
            elif v.dtype == object:
                assert list(got) == list(v), col
            else:
                assert np.array_equal(got, v, equal_nan=True), col
        for j, ends in enumerate(alone.tokens.step_end):  # token times: the replica's own, bit for bit
            assert np.array_equal(merged.tokens.step_end[k * per + j], ends)
    assert merged.gpus == 3 * per  # one GPU per instance in the small case
    assert merged.events == sum(len(s["time_s"]) for s in merged.steps)


def test_one_replica_is_the_plain_run():
    plain = api.simulate(resolve(_small("disagg")))
    d = _small("disagg")
    d["replicas"] = {"count": 1}
    one = api.simulate(resolve(d))
    assert_same_requests(plain.record, one.record)


@settings(max_examples=6, deadline=None)
@given(count=st.integers(1, 4), split=st.sampled_from(["round_robin", "random", "prefix"]),
       seed=st.integers(0, 50))
def test_no_request_lost(count, split, seed):
    d = _scenario(count, split, n=60)
    d["seed"] = seed
    res = api.simulate(resolve(d))
    r = res.record.requests
    assert np.array_equal(r["request_id"], np.arange(60))
    table = materialize(resolve(d).scenario.workload, seed, None)
    assert np.array_equal(r["input_len"], table.input_len)
    assert res.summary()["completed"] + sum(res.summary()["drop_reasons"].values()) == 60


def test_prefix_split_keeps_a_prefix_on_one_replica():
    from pdsim.specs.scenario import ReplicaSpec
    from pdsim.workload.table import RequestTable

    shared = [np.array([7, i]) for i in range(20)] + [np.array([1000 + i]) for i in range(400)]
    t = RequestTable(np.arange(420.0), np.full(420, 1024), np.full(420, 8), shared, block_size=512)
    parts = replicas.split(t, ReplicaSpec(count=4, split="prefix"), 0)
    home = [k for k, p in enumerate(parts) if 0 in p]
    assert all(set(range(20)) <= set(parts[k].tolist()) for k in home)  # one prefix, one replica
    assert sorted(np.concatenate(parts).tolist()) == list(range(420))
    assert min(len(p) for p in parts) > 50  # distinct prefixes spread over the replicas


def test_idle_replica_keeps_its_gpus():
    d = _scenario(8, n=5)
    res = api.simulate(resolve(d))
    assert res.summary()["completed"] == 5
    assert res.record.gpus == 8 * 2
    assert res.record.stats["capacity_gpus"][0] == (0.0, 16.0)


def test_refusals():
    d = _scenario(2)
    d["faults"] = {"events": [{"at_s": 1.0, "kill": "gpu", "instance": "D0.0"}]}
    with pytest.raises(SpecError, match="replicas"):
        resolve(d)
    d = _scenario(2)
    d["workload"]["max_concurrency"] = 4
    with pytest.raises(SpecError, match="closed-loop"):
        api.simulate(resolve(d))
