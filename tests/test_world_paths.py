"""Deterministic runs through the world's rarer paths (the property suite samples them too):
DP attention + EP on a MoE model with and without two-batch overlap, a remote storage tier
shared by instances, a simulated-time horizon, and drops that must release everything.
The world checks its conservation laws at the end of each run (tests/conftest.py)."""
from __future__ import annotations

import copy

import numpy as np

import pdsim

from builders import resolve, scenario_dict


def _moe(tbo: bool) -> dict:
    g = {"count": 1, "nodes": 1, "dp": 8, "ep": 8, "enable_dp_attention": True,
         "engine": {"page_size": 64, "chunked_prefill_size": 16384, "enable_two_batch_overlap": tbo}}
    d = scenario_dict("disagg")
    d.update(model="qwen3-235b-a22b", cluster={"prefill": [copy.deepcopy(g)], "decode": [copy.deepcopy(g)]})
    d["cluster"]["decode"][0]["engine"]["deepep_mode"] = "low_latency"
    d["workload"].update(num_requests=120, rate=20.0, input={"dist": "uniform", "min": 500, "max": 4000},
                         output={"dist": "uniform", "min": 10, "max": 200})
    return d


def test_moe_with_dp_attention_and_ep_runs_with_and_without_tbo():
    plain = pdsim.simulate(resolve(_moe(False)))
    tbo = pdsim.simulate(resolve(_moe(True)))
    for res in (plain, tbo):
        assert res.requests["finished"].all()
        # one pooled KV per DP instance; 8 ranks share the prefill queue round robin
        assert res.record.instances[0].gpus == 8
    a = plain.timeline[plain.timeline["kind"] == "instance"]["step_s"].to_numpy()
    b = tbo.timeline[tbo.timeline["kind"] == "instance"]["step_s"].to_numpy()
    assert not np.array_equal(a[: min(len(a), len(b))], b[: min(len(a), len(b))])


def test_remote_tier_is_one_pool_shared_by_instances():
    d = scenario_dict("colocated")
    d["cluster"]["colocated"][0].update(count=2)
    d["cluster"]["colocated"][0]["engine"].update(max_total_tokens=20000, min_kv_reserve_tokens=1024)
    d["kv_offload"] = {"tiers": [{"device": "remote-nvmeof-400g"}], "write_through": True, "load_policy": "load"}
    d["workload"].update(num_requests=200, rate=20.0, prefix_groups=4, shared_prefix_tokens=2048,
                         input={"dist": "uniform", "min": 100, "max": 2000})
    d["router"] = {"policy": "random"}
    res = pdsim.simulate(resolve(d))
    tiers = res.summary()["tiers"]
    assert len(tiers) == 1 and tiers[0]["device"] == "remote"
    assert tiers[0]["bytes_written"] > 0
    assert res.requests["finished"].all()


def test_horizon_cuts_the_run_and_labels_what_was_left():
    d = scenario_dict("colocated")
    d["workload"].update(num_requests=400, rate=20.0)
    d["duration_limit_s"] = 5.0
    res = pdsim.simulate(resolve(d))
    df = res.requests
    reasons = set(df["drop_reason"].dropna())
    assert reasons <= {"unfinished_at_end", "not_arrived_by_end"} and "not_arrived_by_end" in reasons
    assert res.record.end_s <= 5.0 + 1e-9
    assert (df.loc[df["finished"], "finish_s"] <= 5.0 + 1e-9).all()


def test_drops_release_every_page_they_held():
    """A prompt too large for P is dropped before D pre-allocates for it; later requests are
    served (the world's conservation check fails the run if any page is stranded)."""
    d = scenario_dict("disagg")
    d["cluster"]["prefill"][0]["engine"].update(max_total_tokens=4096, min_kv_reserve_tokens=1024)
    d["workload"].update(num_requests=50, input={"dist": "uniform", "min": 100, "max": 8000})
    df = pdsim.simulate(resolve(d)).requests
    assert set(df["drop_reason"].dropna()) == {"prompt_exceeds_prefill_kv_capacity"}
    assert df["finished"].sum() > 10
