"""The example plug-ins of examples/plugins/: loaded by ``module:Class`` under --allow-plugin,
refused without it and in a sandbox, and doing what their docstrings say."""
from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass

import numpy as np
import pytest

import pdsim
from pdsim.sim.control.router import ROUTERS
from pdsim.sim.engine.scheduler import SCHEDULERS
from pdsim.specs.errors import SpecError
from pdsim.specs.trust import Trust

from builders import REPO, scenario_dict

ROUTER = "examples.plugins.router_power_of_two:PowerOfTwo"
SCHED = "examples.plugins.scheduler_shortest_uncached:ShortestUncachedFirst"
ALLOW = Trust(allow_plugins=("examples",))


@pytest.fixture(autouse=True)
def repo_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO))  # examples/ is importable from the repository root


def test_power_of_two_picks_the_less_loaded_of_two_seeded_draws():
    ref = ROUTERS.resolve(ROUTER, {"load": "requests"}, "router.policy", ALLOW)

    @dataclass
    class V:
        iid: int
        queue_len: int
        running: int = 0
        outstanding_tokens: int = 0
        gpus: int = 1

    views = [V(0, 9), V(1, 1), V(2, 5), V(3, 0)]
    a = ref.create(rng=np.random.default_rng(5))
    b = ref.create(rng=np.random.default_rng(5))
    picks = [a.pick_prefill(None, views).iid for _ in range(200)]
    assert picks == [b.pick_prefill(None, views).iid for _ in range(200)]  # seeded
    # of the 6 equally likely pairs, an instance wins those with a busier partner: the idlest
    # (3) wins 3, then 1 wins 2, 2 wins 1, the busiest (0) none
    counts = np.bincount(picks, minlength=4)
    assert counts[0] == 0
    assert np.abs(counts[[3, 1, 2]] - 200 * np.array([3, 2, 1]) / 6).max() < 25


def test_power_of_two_runs_in_a_scenario_and_spreads_load():
    d = scenario_dict()
    d["cluster"]["prefill"][0]["count"] = 4
    d["router"] = {"policy": ROUTER}
    res = pdsim.simulate(pdsim.resolve_scenario(d, "<t>", REPO / "workloads" / "scenarios", ALLOW))
    df = res.requests
    assert df["finished"].all() and df["prefill_instance"].nunique() == 4


def test_module_plugins_need_allow_plugin_and_never_load_in_a_sandbox():
    d = scenario_dict()
    d["router"] = {"policy": ROUTER}
    with pytest.raises(SpecError, match="--allow-plugin examples"):
        pdsim.resolve_scenario(d, "<t>", REPO)
    with pytest.raises(SpecError, match="not accepted here"):
        pdsim.resolve_scenario(d, "<t>", REPO, Trust.sandboxed(REPO))
    with pytest.raises(SpecError, match="load"):
        ROUTERS.resolve(ROUTER, {"load": "gpus"}, "router.policy", ALLOW, params_field="router.params")


def test_shortest_uncached_orders_by_the_work_left_with_held_prompts_in_front():
    sched = SCHEDULERS.resolve(SCHED, None, "engine.schedule_policy", ALLOW).create()

    @dataclass
    class R:
        rid: int
        input_len: int
        hash_ids: object = None
        pf_admitted: bool = False

    class Cache:
        block_tokens = 512

        def match(self, ids, limit):
            n = 0
            while n < limit and ids[n] < 100:  # ids below 100 are cached
                n += 1
            return n

    q = [R(0, 9000, pf_admitted=True), R(1, 3000, np.array([500, 501, 502, 503, 504, 505])),
         R(2, 4096, np.array([1, 2, 3, 4, 5, 6, 7, 800])), R(3, 1500, np.array([900, 901, 902]))]
    # uncached work: 3000, 4096 - 7 x 512 = 512, 1500
    assert [r.rid for r in sched.order(q, Cache())] == [0, 2, 3, 1]
    assert [r.rid for r in sched.order(q, None)] == [0, 3, 1, 2]  # no cache: shortest prompt first


def test_shortest_uncached_cuts_mean_ttft_on_a_burst():
    def run(policy):
        d = scenario_dict("colocated")
        d["cluster"]["colocated"][0]["engine"]["schedule_policy"] = policy
        d["workload"] = {"kind": "synthetic", "num_requests": 80, "rate": None,
                         "input": {"dist": "uniform", "min": 200, "max": 6000}, "output": {"dist": "fixed", "value": 4}}
        return pdsim.simulate(pdsim.resolve_scenario(d, "<t>", REPO, ALLOW)).summary()["mean_ttft_ms"]

    assert run(SCHED) < 0.8 * run("fcfs")


def test_the_cli_runs_the_example_router_with_allow_plugin():
    cmd = [sys.executable, "-m", "pdsim", "run", "workloads/scenarios/llama8b-a800-1p1d.yaml", "--no-progress",
           "--set", "cluster.prefill.count=3", "--set", "workload.num_requests=60", "--set", f"router.policy={ROUTER}"]
    r = subprocess.run(cmd + ["--allow-plugin", "examples"], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 2 and "--allow-plugin examples" in r.stderr
