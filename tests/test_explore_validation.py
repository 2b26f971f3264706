"""Bad sweeps fail before any simulation starts, naming the file and the axis or field."""
from __future__ import annotations

import pytest
import yaml

from pdsim.explore import RangeSpec, plan_sweep, run_sweep
from pdsim.specs import SpecError

from builders import scenario_dict


def write(tmp_path, sweep: dict, base=None) -> str:
    base = base or scenario_dict("colocated")
    base["workload"]["num_requests"] = 20
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    p = tmp_path / "sweep.yaml"
    p.write_text(yaml.safe_dump({"base": "base.yaml", **sweep}))
    return str(p)


@pytest.fixture
def no_simulation(monkeypatch):
    import pdsim.explore.search as search

    calls = []
    monkeypatch.setattr(search, "simulate_metrics", lambda *a, **k: calls.append(a) or {})
    return calls


OK_AXIS = {"field": "workload.rate", "values": [2.0, 4.0]}


@pytest.mark.parametrize("axis, expect", [
    ({"field": "cluster.colocated.engine.bogus", "values": [1]},
     "axes[1] cluster.colocated[0].engine.bogus: unknown field"),
    ({"field": "cluster.colocated.engine.page_size", "values": [16, "big"]},
     "axes[1] cluster.colocated[0].engine.page_size: expected an integer, got 'big'"),
    ({"field": "workload.rate", "values": [-1.0]}, "axes[1] workload.rate: must be > 0"),
    ({"field": "cluster.colocated.engine.mem_fraction_static", "range": {"start": 0.5, "stop": 1.5, "step": 0.5}},
     "axes[1] cluster.colocated[0].engine.mem_fraction_static: must be in (0, 1]"),
    ({"name": "shape", "linked": {"cluster.colocated.gpus": [1, 2], "cluster.colocated.tp": [1, "two"]}},
     "axes[1] cluster.colocated[0].tp: expected an integer"),
    ({"field": "hardware", "values": ["h100", "no-such-gpu"]}, "axes[1] hardware: unknown hardware profile"),
    ({"field": "router.policy", "values": ["round_robin", "nope"]}, "axes[1] router.policy"),
    ({"field": "cluster..engine", "values": [1]}, "axes[1]"),
    ({"field": "cluster.colocated[3].count", "values": [1]}, "axes[1]"),
])
def test_bad_axes_fail_before_any_simulation(tmp_path, no_simulation, axis, expect):
    p = write(tmp_path, {"axes": [{"field": "cluster.colocated.count", "values": [1]}, axis]})
    with pytest.raises(SpecError) as ei:
        run_sweep(p, tmp_path / "o", workers=1, progress=False)
    msg = str(ei.value)
    assert msg.startswith(p + ": ") and expect in msg, msg
    assert no_simulation == [] and not (tmp_path / "o").exists()


def test_a_value_refused_only_in_some_combinations_is_a_point_not_an_error(tmp_path):
    # dp 2 needs enable_dp_attention: valid next to `true`, an infeasible point next to `false`
    base = scenario_dict("colocated")
    base["cluster"]["colocated"][0]["gpus"] = 2
    p = write(tmp_path, {"axes": [{"field": "cluster.colocated.dp", "values": [1, 2]},
                                  {"field": "cluster.colocated.enable_dp_attention", "values": [True, False]}]},
              base=base)
    plan = plan_sweep(p)
    assert [c.status for c in plan.configs] == ["pending", "pending", "pending", "infeasible"]
    assert "dp > 1 needs enable_dp_attention" in plan.configs[3].reason


@pytest.mark.parametrize("sweep, expect", [
    ({"axs": []}, "sweep.yaml: axs: unknown field (did you mean 'axes'?)"),
    ({"axes": [{"field": "workload.rate"}]}, "axes[0].values: give exactly one of values, range or linked"),
    ({"axes": [{"linked": {"cluster.colocated.gpus": [1, 2], "cluster.colocated.tp": [1]}}]},
     "axes[0].linked: linked value lists must be non-empty and of equal length"),
    ({"axes": [{"field": "workload.rate", "range": {"start": 4, "stop": 1, "step": 1}}]}, "axes[0].range.stop"),
    ({"axes": [{"field": "workload.rate", "values": [1]}, {"field": "workload.rate", "values": [2]}]},
     "axes[1].field: field 'workload.rate' is already swept by axes[0]"),
    ({"search": {"mode": "max_rate"}, "axes": [{"field": "workload.rate", "values": [1]}]},
     "axes[0]: workload.rate is searched by max_rate"),
    ({"search": {"mode": "max_rate", "limits": {"p95_ttft_ms": 100}}}, "search.limits.p95_ttft_ms: unknown"),
    ({"search": {"mode": "max_rate", "target_goodput": None}}, "search.target_goodput: max_rate needs a target"),
    ({"search": {"mode": "max_rate", "rate_field": "workload.speed"}}, "search.rate_field"),
    ({"objectives": [{"metric": "goodput", "goal": "max"}]}, "objectives[0].metric: unknown metric"),
    ({"constraints": {"max_gpu": 8}}, "constraints.max_gpu: unknown field (did you mean 'max_gpus'?)"),
    ({"set": {"workload.nope": 1}}, "workload.nope"),
    ({"slo": {"ttft_ms": -5}}, "slo.ttft_ms: must be > 0"),
])
def test_bad_sweep_files_name_the_field(tmp_path, no_simulation, sweep, expect):
    p = write(tmp_path, sweep)
    with pytest.raises(SpecError) as ei:
        run_sweep(p, tmp_path / "o", workers=1, progress=False)
    assert expect in str(ei.value) and "sweep.yaml" in str(ei.value), str(ei.value)
    assert no_simulation == []


def test_missing_base_names_the_field(tmp_path):
    p = tmp_path / "sweep.yaml"
    p.write_text(yaml.safe_dump({"base": "nowhere.yaml"}))
    with pytest.raises(SpecError, match=r"sweep.yaml: base: cannot load the base scenario"):
        plan_sweep(p)


def test_max_rate_must_search_a_field_that_changes_the_arrivals(tmp_path):
    # W23: a fixed_batch sends everything at t=0; the search reported "SLO still met at the bound"
    fixed = scenario_dict("colocated")
    fixed["workload"] = {"kind": "fixed_batch", "batch_size": 4}
    with pytest.raises(SpecError, match=r"search.rate_field: workload.rate does not change the arrival times of this "
                                        r"'fixed_batch' workload .* use kind: synthetic"):
        plan_sweep(write(tmp_path, {"search": {"mode": "max_rate"}}, base=fixed))
    chat = scenario_dict("colocated")
    chat["workload"] = {"kind": "multi_turn", "conversation": {"sessions": 5}}
    with pytest.raises(SpecError, match="search rate_field: workload.conversation.session_rate"):
        plan_sweep(write(tmp_path, {"search": {"mode": "max_rate"}}, base=chat))
    # ... and its session rate is a valid search field
    search = {"mode": "max_rate", "rate_field": "workload.conversation.session_rate"}
    plan = plan_sweep(write(tmp_path, {"search": search}, base=chat))
    assert [c.status for c in plan.configs] == ["pending"]


def test_max_rate_on_traces(tmp_path):
    import json

    rows = "".join(json.dumps({"timestamp": 1000 * k, "input_length": 50, "output_length": 5}) + "\n"
                   for k in range(20))
    (tmp_path / "t.jsonl").write_text(rows)
    trace = scenario_dict("colocated")
    trace["workload"] = {"kind": "trace", "trace": {"path": "t.jsonl"}}
    # workload.rate gives a trace's requests new arrival times: a valid search
    assert plan_sweep(write(tmp_path, {"search": {"mode": "max_rate"}}, base=trace)).configs[0].status == "pending"
    ts = {"mode": "max_rate", "rate_field": "workload.trace.time_scale", "low": 0.01, "high": 10.0}
    assert plan_sweep(write(tmp_path, {"search": ts}, base=trace)).configs[0].status == "pending"
    # a benchmark result without send times: every request at t=0, its time scale does nothing
    (tmp_path / "b.json").write_text(json.dumps({"input_lens": [50] * 20, "output_lens": [5] * 20}))
    trace["workload"]["trace"]["path"] = "b.json"
    with pytest.raises(SpecError, match=r"workload.trace.time_scale does not change .* search rate_field: "
                                        r"workload.rate"):
        plan_sweep(write(tmp_path, {"search": ts}, base=trace))


def test_ranges():
    assert RangeSpec(10, 40, step=10).values() == [10, 20, 30, 40]
    assert RangeSpec(64, 1024, step=2, log=True).values() == [64, 128, 256, 512, 1024]
    assert RangeSpec(1, 100, num=3, log=True).values() == [1, 10, 100]
    assert RangeSpec(1, 2, num=3).values() == [1.0, 1.5, 2.0]
    assert RangeSpec(0.5, 1.0, step=0.25).values() == [0.5, 0.75, 1.0]
