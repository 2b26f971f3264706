"""The bundled routing experiment on the Mooncake conversation trace, in its reduced form:
cache-aware routing cuts prefill work and TTFT against round robin, and early rejection keeps
goodput up under overload — each a paired difference significant at 5 % over the replicates.
(The full experiment, workloads/experiments/mooncake-routing.yaml, is only planned here; its
numbers are in docs/policies.md.)"""
from __future__ import annotations

import time

from pdsim.experiment import plan_experiment, run_experiment

from builders import REPO

EXP = REPO / "workloads" / "experiments"


def test_the_full_experiment_is_well_formed():
    plan = plan_experiment(EXP / "mooncake-routing.yaml")
    assert len(plan.runs) == 7 * 4 * 5
    assert {r.policy for r in plan.runs} >= {"round_robin", "sglang_cache_aware", "conductor_early_reject"}


def test_the_reduced_experiment_reproduces_the_qualitative_results(tmp_path):
    t0 = time.perf_counter()
    res = run_experiment(EXP / "mooncake-routing-quick.yaml", tmp_path, workers=1, progress=False)
    assert time.perf_counter() - t0 < 60
    assert (res.runs["status"] == "ok").all()
    pt = res.paired.set_index(["workload", "policy", "metric"])

    def diff(wl, pol, metric):
        return pt.loc[(wl, pol, metric)]

    # cache-aware routing: less prefill work and a shorter TTFT than round robin, at both loads
    for wl in ("1x", "3x"):
        work = diff(wl, "sglang_cache_aware", "prefill_tokens")
        assert work["mean_diff"] < 0 and work["ci_high"] < 0 and work["p_value"] < 0.05
        hit = diff(wl, "sglang_cache_aware", "prefix_cache_hit_rate")
        assert hit["mean_diff"] > 0 and hit["p_value"] < 0.05
    ttft = diff("1x", "sglang_cache_aware", "mean_ttft_ms")
    assert ttft["mean_diff"] < 0 and ttft["p_value"] < 0.05
    # early rejection under 3x overload: a few requests turned away, goodput several times higher
    good = diff("3x", "conductor_early_reject", "request_goodput")
    assert good["ci_low"] > 0 and good["p_value"] < 0.05 and good["rel_diff"] > 1.0
    share = res.summary.query("workload == '3x' and policy == 'conductor_early_reject' and metric == 'rejected_share'")
    assert 0 < share["mean"].iloc[0] < 0.25
    # at 1x the same router rejects little and keeps goodput at least as high as round robin
    light = diff("1x", "conductor_early_reject", "request_goodput")
    assert light["ci_high"] > 0
