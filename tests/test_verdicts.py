"""Bottleneck verdicts: each kind on a small scenario built to have that bottleneck, its
evidence and its suggestions checked by re-simulation; a healthy run gets only "healthy"."""
from __future__ import annotations

import json

import pytest

import pdsim
from pdsim.metrics.results import Results
from pdsim.explore import what_if
from pdsim.explore.what_if import check_suggestions
from pdsim.metrics.verdicts import Suggestion, Verdict, verdict_lines, verdicts_json
from pdsim.report.verdict_html import verdicts_html

from builders import resolve, scenario_dict


def diagnose(res, **kw):
    """what_if.diagnose with a generous check budget: these runs take a fraction of a second, and
    the default budget (the run's own simulation time) would check one suggestion at most."""
    kw.setdefault("budget_s", 60.0)
    return what_if.diagnose(res, **kw)


def _run(d: dict):
    return pdsim.simulate(resolve(d))


def _kinds(verdicts) -> list[str]:
    return [v.kind for v in verdicts]


def _the(verdicts, kind: str) -> Verdict:
    found = [v for v in verdicts if v.kind == kind]
    assert found, f"no {kind} verdict in {_kinds(verdicts)}"
    return found[0]


def _helped(v: Verdict, words: str):
    """The suggestion whose action mentions ``words``: it was re-simulated and it helped."""
    s = [s for s in v.suggestions if words in s.action]
    assert s, f"no suggestion about {words!r}: {[x.action for x in v.suggestions]}"
    assert s[0].check is not None, s[0].note
    assert s[0].check.helped, s[0].check
    return s[0].check


# ---- scenarios built to have one bottleneck each ----------------------------------------------
def healthy() -> dict:
    return scenario_dict()


def overloaded() -> dict:
    d = scenario_dict(slo={"ttft_ms": 2000, "tpot_ms": 50})
    d["workload"].update(num_requests=200, rate=30.0, input={"dist": "uniform", "min": 2000, "max": 6000})
    return d


def prefill_heavy() -> dict:
    d = scenario_dict(slo={"ttft_ms": 1000, "tpot_ms": 50})
    d["workload"].update(num_requests=60, rate=0.5, input={"dist": "uniform", "min": 4000, "max": 40000},
                         output={"dist": "uniform", "min": 10, "max": 50})
    return d


def decode_heavy() -> dict:
    d = scenario_dict(slo={"ttft_ms": 2000, "tpot_ms": 9})
    d["workload"].update(num_requests=300, rate=20.0, input={"dist": "uniform", "min": 200, "max": 1000},
                         output={"dist": "uniform", "min": 200, "max": 600})
    return d


def kv_starved() -> dict:
    d = scenario_dict(slo={"ttft_ms": 1000, "tpot_ms": 50})
    d["cluster"]["decode"][0]["engine"].update(max_total_tokens=30000, min_kv_reserve_tokens=1024)
    d["workload"].update(num_requests=200, rate=8.0, input={"dist": "uniform", "min": 1000, "max": 3000},
                         output={"dist": "uniform", "min": 200, "max": 600})
    return d


def transfer_heavy(page_size: int = 16, nic_gbit: float | None = None) -> dict:
    d = scenario_dict(slo={"ttft_ms": 500, "tpot_ms": 50})
    if nic_gbit:
        d["transfer"] = {"backend": "mooncake", "nic_gbit": nic_gbit}
    for role in ("prefill", "decode"):
        d["cluster"][role][0]["engine"]["page_size"] = page_size
    # long prompts and outputs fill D's pool: at page 1 its pre-allocations fragment into single
    # pages (kv/pool.py), the regime where small pages collapse transfers (Mooncake #522)
    d["workload"].update(num_requests=200, rate=4.0, input={"dist": "uniform", "min": 6000, "max": 10000},
                         output={"dist": "uniform", "min": 256, "max": 768})
    return d


def unevenly_routed() -> dict:
    d = scenario_dict(router={"policy": "random"}, slo={"ttft_ms": 200, "tpot_ms": 50})
    d["cluster"]["prefill"][0]["count"] = 3
    d["workload"].update(num_requests=400, rate=24.0, input={"dist": "uniform", "min": 1000, "max": 4000},
                         output={"dist": "uniform", "min": 10, "max": 50})
    return d


def offload_heavy() -> dict:
    """32 distinct 10k-token prompts asked 4 times; a KV pool of 4 prompts, the rest on a Gen4
    NVMe SSD, loads forced (load_policy load) though recomputing is faster."""
    d = scenario_dict("colocated", slo={"ttft_ms": 300, "tpot_ms": 50})
    d["cluster"]["colocated"][0]["engine"].update(max_total_tokens=40000, min_kv_reserve_tokens=1024,
                                                  chunked_prefill_size=8192)
    d["kv_offload"] = {"tiers": [{"device": "local-nvme-gen4"}], "load_policy": "load"}
    d["workload"] = {"kind": "trace", "trace": {"path": "../traces/repeated_prompts_10k.jsonl", "format": "mooncake"}}
    return d


def with_a_failure() -> dict:
    """Two decode instances; one fails 10 s in and restarts."""
    d = scenario_dict(slo={"ttft_ms": 1000, "tpot_ms": 50})
    d["cluster"]["decode"][0]["count"] = 2
    d["workload"].update(num_requests=400, rate=10.0, input={"dist": "uniform", "min": 200, "max": 1000},
                         output={"dist": "uniform", "min": 100, "max": 300})
    d["faults"] = {"events": [{"at_s": 10, "kill": "gpu", "instance": "D0.0", "recover_after_s": 20}],
                   "detection": {"heartbeat_s": 1.0, "misses": 3}, "retry": {"policy": "restart", "max_retries": 2}}
    return d


# ---- one test per kind -------------------------------------------------------------------------
def test_healthy_run_gets_only_healthy():
    res = _run(healthy())
    verdicts = diagnose(res)
    assert _kinds(verdicts) == ["healthy"]
    v = verdicts[0]
    assert v.severity == "info" and not v.suggestions
    assert any("p90 TTFT" in e for e in v.evidence) and v.metrics["headroom"] > 1


def test_overload_says_by_how_much_the_rate_exceeds_capacity():
    v = _the(diagnose(_run(overloaded())), "overload")
    assert v.severity == "high" and v.metrics["load_ratio"] > 1.5
    assert v.metrics["utilisation"] > 0.95 and v.metrics["capacity_rate"] < v.metrics["offered_rate"]
    assert any("of their capacity" in e for e in v.evidence)
    check = _helped(v, "add prefill instances")
    assert check.goodput_after > 0.9 > check.goodput_before and check.gpus_after > check.gpus_before


def test_prefill_bound_long_prompts():
    v = _the(diagnose(_run(prefill_heavy())), "prefill_bound")
    assert v.metrics["prefill_share_of_ttft"] > 0.5
    assert any("in prefill alone" in e for e in v.evidence)
    _helped(v, "twice the GPUs per prefill instance")


def test_decode_bound_prices_the_step_as_hbm_bound():
    v = _the(diagnose(_run(decode_heavy())), "decode_bound")
    assert v.metrics["hbm_gain"] > 2 * v.metrics["compute_gain"]  # small-batch decode reads weights and KV
    assert v.metrics["batch_within_bound"] < v.metrics["mean_batch"]
    assert "HBM" in v.title
    _helped(v, "add a decode instance")


def test_kv_capacity_bound_preallocation_waits():
    v = _the(diagnose(_run(kv_starved())), "kv_capacity_bound")
    assert v.metrics["kv_p95"] > 0.9 and v.metrics["page_wait_share_of_ttft"] > 0.5
    assert any("retractions" in e for e in v.evidence)
    _helped(v, "add a decode instance")


def test_transfer_bound_small_pages_and_the_page_size_fix():
    """page_size 1 makes the per-chunk transfer cost dominate; 64 fixes it (Mooncake #522)."""
    small = diagnose(_run(transfer_heavy(page_size=1)))
    v = _the(small, "transfer_bound")
    check = _helped(v, "larger KV pages")
    assert check.after < check.before / 5
    big = diagnose(_run(transfer_heavy(page_size=64)), check=False)
    assert "transfer_bound" not in _kinds(big)


def test_transfer_bound_slow_nic():
    v = _the(diagnose(_run(transfer_heavy(nic_gbit=25))), "transfer_bound")
    assert any("busiest link" in e and "flows share it" in e for e in v.evidence)
    _helped(v, "faster fabric")


def test_router_imbalance_under_random_routing():
    v = _the(diagnose(_run(unevenly_routed())), "router_imbalance")
    assert v.metrics["util_spread"] > 0.15
    _helped(v, "least_loaded")


def test_offload_bound_and_load_policy():
    v = _the(diagnose(_run(offload_heavy())), "offload_bound")
    assert v.metrics["load_share_of_ttft"] > 0.5
    check = _helped(v, "load_policy cheaper")
    assert check.goodput_after > check.goodput_before


def test_failures_tie_misses_to_the_lost_capacity():
    v = _the(diagnose(_run(with_a_failure())), "failures")
    assert v.metrics["failures"] == 1
    assert v.metrics["miss_share_affected"] > v.metrics["miss_share_unaffected"]
    assert any("D0.0 at 10 s" in e for e in v.evidence)
    _helped(v, "a spare decode instance")


# ---- serialisation, budget, text and HTML ------------------------------------------------------
def test_verdicts_serialise_to_json():
    verdicts = diagnose(_run(overloaded()))
    data = json.loads(json.dumps(verdicts_json(verdicts)))
    first = data[0]
    assert first["kind"] == "overload" and first["severity"] == "high"
    assert isinstance(first["evidence"], list) and first["evidence"]
    s = first["suggestions"][0]
    assert set(s) == {"action", "overrides", "why", "check", "note"}
    checked = [x for x in first["suggestions"] if x["check"]]
    assert {"metric", "before", "after", "goodput_before", "goodput_after"} <= set(checked[0]["check"])


def test_checks_respect_the_budget():
    """By default the checks take at most the run's own simulation time; a check that would not
    fit is not started, one that overruns is stopped; each check announces itself first."""
    res = _run(kv_starved())
    slow = diagnose(res, budget_s=0.0)
    notes = [s.note for v in slow for s in v.suggestions]
    assert notes and all(n.startswith("not checked: the verdict-check budget") for n in notes)
    seen = []
    default = what_if.diagnose(res, on_check=lambda i, n, s, left: seen.append((i, n, left)))
    sugg = [s for v in default for s in v.suggestions]
    checked = [s for s in sugg if s.check is not None]
    assert len(checked) <= 1 and len(seen) <= 1  # each check costs about the run itself
    assert sum(s.check.wall_s for s in checked) <= res.record.wall_s * 3 + 0.5  # stopped near the budget
    assert any("run's own simulation time" in s.note for s in sugg)
    assert all(left <= res.record.wall_s + 1e-9 for _i, _n, left in seen)
    one = diagnose(res, max_checks=1)
    sugg = [s for v in one for s in v.suggestions]
    assert sum(s.check is not None for s in sugg) == 1
    unchecked = diagnose(res, check=False)
    assert all(s.check is None and not s.note for v in unchecked for s in v.suggestions)


def test_a_check_past_the_budget_is_stopped():
    res = _run(kv_starved())
    v = Verdict("overload", "high", "test", ("e",), {}, "p90_ttft_ms",
                (Suggestion("more decode", ("cluster.decode[0].count=2",), "why"),))
    # a budget smaller than the run: the expected cost does not fit, so nothing starts
    [out] = check_suggestions(res, [v], budget_s=res.record.wall_s * 0.5)
    assert out.suggestions[0].check is None and "allows no more runs" in out.suggestions[0].note
    with pytest.raises(what_if.OverBudget):
        import time

        what_if.resimulate(res.scenario, ("cluster.decode[0].count=2",), deadline=time.perf_counter() - 1.0)


def test_a_refused_override_is_reported_not_raised():
    res = _run(healthy())
    v = Verdict("overload", "high", "test", ("e",), {}, "p90_ttft_ms",
                (Suggestion("3 GPUs", ("cluster.prefill[0].gpus=3",), "why"),))
    [out] = check_suggestions(res, [v])
    assert out.suggestions[0].check is None
    assert out.suggestions[0].note.startswith("not applicable:") and "do not divide" in out.suggestions[0].note


def test_a_run_without_scenario_gets_slo_facts_only():
    res = _run(overloaded())
    real = Results(res.record, None)  # e.g. a replayed real run: nothing to re-simulate or price
    verdicts = diagnose(real)
    assert _kinds(verdicts) == ["slo_misses"] and not verdicts[0].suggestions


def test_text_and_html_show_evidence_and_checks():
    verdicts = diagnose(_run(overloaded()))
    text = "\n".join(verdict_lines(verdicts))
    assert "verdict: overload (high)" in text and "checked:" in text and "--set cluster.prefill[0].count=" in text
    res = _run(overloaded())
    page = verdicts_html(verdicts, res.summary())
    assert "<section class='verdicts'>" in page and "overload" in page and "SLO misses by term" in page
    evil = Verdict("healthy", "info", "<script>alert(1)</script>", ("<b>x</b>",))
    assert "<script>alert" not in verdicts_html([evil])


def test_cli_run_prints_slo_misses_and_verdicts(tmp_path, capsys):
    import yaml

    from pdsim.cli import main

    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(overloaded()))
    assert main(["run", str(p), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "SLO misses by term: TTFT > 2000 ms:" in out
    assert "verdict: overload (high)" in out and "checked:" in out


@pytest.mark.parametrize("builder", [healthy, overloaded, decode_heavy, kv_starved, transfer_heavy, offload_heavy])
def test_diagnose_is_deterministic(builder):
    a = verdicts_json(diagnose(_run(builder()), check=False))
    b = verdicts_json(diagnose(_run(builder()), check=False))
    assert a == b


def test_summary_json_and_report_carry_verdicts(tmp_path):
    import inspect

    from pdsim.report.outputs import write_run_outputs

    if "verdicts" not in inspect.signature(write_run_outputs).parameters:
        pytest.skip("report/outputs.py does not take verdicts yet (the hook for summary.json and report.html is in "
                    "the answers report)")
    res = _run(overloaded())
    verdicts = diagnose(res, check=False)
    write_run_outputs(res, tmp_path, report=True, verdicts=verdicts)
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["verdicts"][0]["kind"] == "overload"
    assert "<section class='verdicts'>" in (tmp_path / "report.html").read_text()
