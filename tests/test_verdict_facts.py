"""Verdict facts about what a scenario exists to show (metrics/detectors_facts.py), the wording
fixes of the healthy and prefill_bound verdicts, and the spare-instance suggestion on a scenario
whose faults name a one-instance group (dsr1-h800-decode64-monolithic)."""
from __future__ import annotations

from types import SimpleNamespace

import pdsim
from pdsim.explore import what_if
from pdsim.metrics.detectors import diagnose
from pdsim.metrics.detectors_faults import _renamed_faults

from builders import resolve, scenario_dict


def _the(verdicts, kind):
    found = [v for v in verdicts if v.kind == kind]
    assert found, [v.kind for v in verdicts]
    return found[0]


def test_absorbed_failures_are_stated():
    d = scenario_dict(slo={"ttft_ms": 5000, "tpot_ms": 100})
    d["cluster"]["decode"][0]["count"] = 2
    d["workload"].update(num_requests=150, rate=3.0, input={"dist": "uniform", "min": 200, "max": 1000},
                         output={"dist": "uniform", "min": 50, "max": 150})
    d["faults"] = {"events": [{"at_s": 10, "kill": "gpu", "instance": "D0.0", "recover_after_s": 5}],
                   "detection": {"heartbeat_s": 1.0, "misses": 3}, "retry": {"policy": "restart", "max_retries": 2}}
    verdicts = diagnose(pdsim.simulate(resolve(d)))
    assert "failures" not in [v.kind for v in verdicts]
    v = _the(verdicts, "absorbed_failures")
    assert v.severity == "info" and v.metrics["failures"] == 1
    assert v.metrics["retries"] >= 1 and "retries" in v.title
    assert verdicts[0].kind in ("healthy", "slo_misses")  # the fact follows the run's verdict


def test_expert_imbalance_is_quantified_and_checkable():
    res = pdsim.simulate(pdsim.load_scenario("dsv3-h800-skewed-experts", ["workload.num_requests=200"]))
    v = _the(diagnose(res), "expert_imbalance")
    assert v.metrics["skew"] == 0.5 and v.metrics["imbalance_vs_uniform"] > 1.2
    assert any("Zipf" in e for e in v.evidence) and any("uniform popularity" in e for e in v.evidence)
    overrides = [s.overrides for s in v.suggestions]
    assert ("workload.expert_load.skew=0",) in overrides
    assert any("ep_num_redundant_experts" in o[0] for o in overrides)
    for o in overrides:  # every suggestion applies to the scenario
        what_if.plain(res.scenario)
        pdsim.load_scenario("dsv3-h800-skewed-experts", ["workload.num_requests=200", *o])


def test_offload_tiers_say_where_prompt_tokens_came_from():
    res = pdsim.simulate(pdsim.load_scenario("dsr1-h20-offload-dram", ["workload.num_requests=200"]))
    v = _the(diagnose(res), "offload_tiers")
    assert "host_dram" in v.evidence[0] and "computed" in v.evidence[0]
    assert any("nothing evicted" in e for e in v.evidence)
    assert 0 < v.metrics["tier_token_share"] < 1
    [s] = v.suggestions
    assert s.overrides == ("kv_offload=null",)
    assert pdsim.load_scenario("dsr1-h20-offload-dram", list(s.overrides)).scenario.kv_offload is None


def test_spare_instance_keeps_the_faults_on_their_instance():
    resolved = pdsim.load_scenario("dsr1-h800-decode64-monolithic")
    fake = SimpleNamespace(scenario=resolved)
    renames = _renamed_faults(fake, "D0", 1)
    assert len(renames) == 10 and renames[0] == "faults.events[0].instance=D0.0"
    sc = pdsim.load_scenario("dsr1-h800-decode64-monolithic", ["cluster.decode[0].count=2", *renames])
    assert {e.instance for e in sc.scenario.faults.events} == {"D0.0"}
    assert _renamed_faults(fake, "D0", 2) == ()


def test_healthy_states_utilisation_from_work_done():
    res = pdsim.simulate(pdsim.load_scenario("dsv3-h800-p4d9", ["workload.num_requests=300"]))
    v = _the(diagnose(res), "healthy")
    line = [e for e in v.evidence if "prefill work" in e][0]
    assert "busy" not in line
    assert 0 < v.metrics["front_work_utilisation"] < 0.6  # 30 req/s against ~133 req/s of capacity


def test_prefill_bound_does_not_blame_short_prompts():
    """P4D9 just past its prefill capacity (~67 req/s since the DeepEP internode refit and the
    expected-maximum expert load; 70 req/s offered): every prompt is 1-3k tokens; the missing ones
    are no longer than the rest, so prefill time is steps shared with other prompts, not long prompts."""
    res = pdsim.simulate(pdsim.load_scenario("dsv3-h800-p4d9", ["workload.rate=70", "workload.num_requests=1800"]))
    v = _the(diagnose(res), "prefill_bound")
    assert "long prompts" not in v.title and "share prefill steps" in v.title
    assert any("not longer than the others'" in e for e in v.evidence)


def test_autoscaler_example_scales_and_says_so():
    res = pdsim.simulate(pdsim.load_scenario("llama8b-a800-autoscale", ["workload.num_requests=1500"]))
    v = _the(diagnose(res), "scaling")
    assert v.metrics["scaled_up"] >= 1 and "GPU-hours" in " ".join(v.evidence)


def test_slo_misses_name_long_prompts():
    """Misses that no single bottleneck explains, concentrated on the long prompts: said."""
    d = scenario_dict(slo={"ttft_ms": 300, "tpot_ms": 100})
    d["workload"].update(num_requests=200, rate=2, input={"dist": "lognormal", "mean": 4000, "std": 6000, "min": 100,
                                                          "max": 40000}, output={"dist": "uniform", "min": 10, "max": 50})
    v = _the(diagnose(pdsim.simulate(resolve(d))), "slo_misses")
    assert any(e.startswith("the requests that miss TTFT have long prompts") for e in v.evidence)
