"""``pdsim experiment``: validation naming the arm, common random numbers, the tables agree
with the statistics of the runs, resumability, worker-count independence, the CLI."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import yaml

from pdsim.api import resolve_scenario
from pdsim.experiment import plan_experiment, run_experiment
from pdsim.experiment.stats import mean_ci, paired
from pdsim.specs.errors import SpecError
from pdsim.workload import materialize

from builders import REPO, scenario_dict


def write(tmp_path, exp: dict, base: dict | None = None):
    b = base or scenario_dict()
    b["cluster"]["prefill"][0]["count"] = 2
    b["workload"].update({"num_requests": 40, "shared_prefix_tokens": 1024, "prefix_groups": 3})
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(b))
    doc = {"name": "t", "base": "base.yaml", "seeds": [1, 2, 3],
           "policies": [{"name": "rr", "set": {"router.policy": "round_robin"}},
                        {"name": "ca", "set": {"router.policy": "sglang_cache_aware"}}],
           "workloads": [{"name": "light", "load": 4.0, "set": {"workload.rate": 4.0}},
                         {"name": "heavy", "load": 8.0, "set": {"workload.rate": 8.0}}]}
    doc.update(exp)
    p = tmp_path / "exp.yaml"
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    return p


# ---- validation -------------------------------------------------------------------------------
@pytest.mark.parametrize("exp,field,msg", [
    ({"baseline": "nope"}, "baseline", "not a policy name"),
    ({"seeds": [1]}, "seeds", "at least 2"),
    ({"seeds": [1, 1]}, "seeds", "distinct"),
    ({"replicate_set": {"workload.rate": [1, 2]}}, "replicate_set.workload.rate", "one value per seed"),
    ({"metrics": ["mean_ttft"]}, "metrics[0]", "did you mean 'mean_ttft_ms'"),
    ({"policies": [{"name": "a b", "set": {}}]}, "policies[0].name", "names are"),
    ({"policies": [{"name": "x", "set": {"router.policy": "nope"}}]}, "policies[x]: router.policy",
     "unknown router"),
    ({"policies": [{"name": "x", "set": {"router.policy": "dynamo_kv", "router.params": {"temperature": 1}}}]},
     "policies[x]: router.params.temperature", "did you mean 'router_temperature'"),
    ({"workloads": [{"name": "w", "set": {"workload.rat": 3}}]}, "workloads[w]: workload.rat", "unknown field"),
])
def test_a_bad_experiment_names_the_arm_before_running(tmp_path, exp, field, msg):
    p = write(tmp_path, exp)
    with pytest.raises(SpecError) as e:
        plan_experiment(p)
    assert e.value.source == str(p) and e.value.field == field, str(e.value)
    assert msg in e.value.message


def test_common_random_numbers_every_policy_of_a_replicate_sees_the_same_requests(tmp_path):
    plan = plan_experiment(write(tmp_path, {}))
    assert len(plan.runs) == 2 * 2 * 3
    tables = {}
    for run in plan.runs:
        sc = resolve_scenario(run.data, "<t>", plan.base_dir).scenario
        t = materialize(sc.workload, seed=sc.seed, base_dir=plan.base_dir)
        tables.setdefault((run.workload, run.replicate), []).append((run.policy, t))
    for (wl, rep), group in tables.items():
        (_, a), (_, b) = group
        assert np.array_equal(a.arrival_s, b.arrival_s) and np.array_equal(a.input_len, b.input_len)
        assert all(np.array_equal(x, y) for x, y in zip(a.hash_ids, b.hash_ids))
    # and the replicates differ from each other
    assert not np.array_equal(tables[("light", 0)][0][1].input_len, tables[("light", 1)][0][1].input_len)


# ---- a whole run ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def done(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("exp")
    p = write(tmp, {"metrics": ["mean_ttft_ms", "prefill_tokens", "request_goodput", "rejected_share"]})
    return p, tmp / "out", run_experiment(p, tmp / "out", workers=1, progress=False)


def test_outputs_are_written(done):
    _p, out, res = done
    for name in ("runs.parquet", "runs.csv", "summary.parquet", "summary.csv", "paired.parquet", "paired.csv",
                 "quantiles.parquet", "cdf.csv", "report.html", "plotly.min.js", "experiment.json"):
        assert (out / name).is_file(), name
    assert len(list((out / "configs").glob("*.yaml"))) == 12 and len(list((out / "cache").glob("*.json"))) == 12
    meta = json.loads((out / "experiment.json").read_text())
    assert meta["ok"] == 12 and meta["baseline"] == "rr"
    html = (out / "report.html").read_text()
    assert "TTFT (s) CDF" in html and "request_goodput vs offered load" in html and "plotly.min.js" in html
    assert pd.read_parquet(out / "runs.parquet").shape[0] == 12


def test_a_config_reruns_with_pdsim_run(done):
    _p, out, res = done
    run = res.plan.runs[0]
    cfg = out / "configs" / f"{run.run_id}.yaml"
    r = subprocess.run([sys.executable, "-m", "pdsim", "run", str(cfg), "--no-progress"], capture_output=True,
                       text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr


def test_summary_and_paired_tables_are_the_statistics_of_the_runs(done):
    _p, _out, res = done
    runs = res.runs
    for (wl, pol), g in runs.groupby(["workload", "policy"]):
        row = res.summary.query("workload == @wl and policy == @pol and metric == 'prefill_tokens'").iloc[0]
        ci = mean_ci(g["prefill_tokens"], 0.95)
        assert (row["mean"], row["ci_low"], row["ci_high"], row["n"]) == pytest.approx((ci.mean, ci.low, ci.high, 3))
    for wl in ("light", "heavy"):
        x = runs.query("workload == @wl and policy == 'ca'").sort_values("replicate")["prefill_tokens"]
        y = runs.query("workload == @wl and policy == 'rr'").sort_values("replicate")["prefill_tokens"]
        t = paired(x.to_numpy(), y.to_numpy())
        row = res.paired.query("workload == @wl and metric == 'prefill_tokens'").iloc[0]
        assert row["policy"] == "ca" and row["baseline"] == "rr"
        assert (row["mean_diff"], row["p_value"]) == pytest.approx((t.mean_diff, t.p_value), nan_ok=True)
        assert row["mean_diff"] < 0  # cache-aware routing computes less on shared prefixes
    q = res.quantiles
    assert set(q["latency"]) == {"ttft_s", "tpot_s", "e2e_s"} and len(q) == 12 * 3 * 101
    one = q.query("latency == 'ttft_s'").groupby(["workload", "policy", "replicate"])["value"]
    assert (one.apply(lambda v: np.all(np.diff(v.to_numpy()) >= 0))).all()  # quantile functions increase


def test_a_rerun_reads_the_cache_and_gives_the_same_tables(done):
    p, out, res = done
    again = run_experiment(p, out, workers=1, progress=False)
    assert again.computed == 0 and again.cached == 12
    pd.testing.assert_frame_equal(again.summary, res.summary)
    victim = next((out / "cache").glob("*.json"))
    victim.unlink()
    third = run_experiment(p, out, workers=1, progress=False)
    assert third.computed == 1
    pd.testing.assert_frame_equal(third.paired, res.paired)


def test_results_do_not_depend_on_the_worker_count(done, tmp_path):
    p, _out, res = done
    two = run_experiment(p, tmp_path / "two", workers=2, progress=False)
    cols = ["deployment", "workload", "policy", "replicate", "mean_ttft_ms", "prefill_tokens", "request_goodput"]
    pd.testing.assert_frame_equal(two.runs[cols], res.runs[cols])


def test_an_infeasible_run_is_recorded_not_fatal(tmp_path):
    # well-formed, but the model does not fit in 10 % of an H100: infeasible when it runs
    p = write(tmp_path, {"deployments": [{"name": "ok", "set": {}},
                                         {"name": "tiny", "set": {"cluster.decode.engine.mem_fraction_static": 0.1}}],
                         "workloads": [{"name": "w", "set": {}}], "seeds": [1, 2]})
    res = run_experiment(p, tmp_path / "out", workers=1, progress=False)
    assert (res.runs.query("deployment == 'ok'")["status"] == "ok").all()
    tiny = res.runs.query("deployment == 'tiny'")
    assert len(tiny) == 4 and (tiny["status"] == "infeasible").all()
    assert tiny["reason"].str.contains("does not fit").all()
    assert set(res.summary["deployment"]) == {"ok"}  # intervals only over runs that finished


# ---- CLI ---------------------------------------------------------------------------------------
def test_cli_runs_an_experiment_and_reports_bad_input_in_one_line(tmp_path):
    p = write(tmp_path, {"seeds": [1, 2], "workloads": [{"name": "w", "set": {}}]})
    r = subprocess.run([sys.executable, "-m", "pdsim", "experiment", str(p), "--out", str(tmp_path / "o"),
                        "--workers", "1"], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert "4 runs: 4 ok" in r.stdout
    bad = write(tmp_path, {"baseline": "nope"})
    r = subprocess.run([sys.executable, "-m", "pdsim", "experiment", str(bad), "--out", str(tmp_path / "o2")],
                       capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "baseline" in r.stderr and "Traceback" not in r.stderr


def test_ray_without_ray_installed_is_a_clear_error(tmp_path):
    try:
        import ray  # noqa: F401
        pytest.skip("ray is installed here")
    except ImportError:
        pass
    p = write(tmp_path, {"seeds": [1, 2], "workloads": [{"name": "w", "set": {}}]})
    with pytest.raises(SpecError, match=r"needs ray, which is not installed: pip install 'pdsim\[ray\]'"):
        run_experiment(p, tmp_path / "o", ray=True, progress=False)
