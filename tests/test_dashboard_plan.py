"""The planning parts of the dashboard without a browser: sweep bounds and value parsing, the
before / after rows, link utilisation in % of capacity, live KV apart from the prefix cache,
applying a suggestion (and refusing what does not name one), downloads and launch text."""
from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest
import yaml

import pdsim
from builders import resolve, scenario_dict
from pdsim.dashboards import downloads, panels, plan_callbacks, sweep_jobs
from pdsim.dashboards.run_figures import kv_use, link_utilisation
from pdsim.dashboards.sessions import new_session_id
from pdsim.metrics.results import Results
from test_dashboard import make_services

SID = new_session_id()  # issued by this process, as the page would get it


@pytest.fixture(scope="module")
def prefix_run():
    """1P1D, 4 shared 1,000-token prefixes: P keeps them cached after their KV left for D."""
    d = scenario_dict("disagg")
    d["workload"].update(num_requests=80, shared_prefix_tokens=1000, prefix_groups=4)
    res = pdsim.simulate(resolve(d))
    return Results(res.record, res.scenario)


def test_sweep_values_and_bounds_give_one_line_errors():
    assert sweep_jobs.parse_values("1, 2.5, 4", "v") == [1, 2.5, 4]
    for bad, msg in (("", "give the values"), ("1, x", "expected numbers"), ("2, 2", "listed twice"),
                     ("1, nan", "finite")):
        with pytest.raises(pdsim.SpecError, match=msg):
            sweep_jobs.parse_values(bad, "sweep axis 1 values")
    doc = sweep_jobs.sweep_document("s", [("workload.rate", [1, 2]), ("cluster.colocated.count", [1, 2, 3])])
    assert doc["base"] == "base.yaml" and [a["field"] for a in doc["axes"]] == ["workload.rate",
                                                                                "cluster.colocated.count"]
    with pytest.raises(pdsim.SpecError, match="at most 16"):
        sweep_jobs.sweep_document("s", [("workload.rate", list(range(5))), ("cluster.colocated.count", [1, 2, 3, 4])])
    with pytest.raises(pdsim.SpecError, match="same knob"):
        sweep_jobs.sweep_document("s", [("workload.rate", [1]), ("workload.rate", [2])])
    with pytest.raises(pdsim.SpecError, match="pick the knob"):
        plan_callbacks.sweep_axes(None, "1, 2", None, None)


def test_a_refused_axis_value_is_reported_before_anything_runs(tmp_path):
    from pdsim.dashboards.validation import validate

    svc = make_services(tmp_path / "data")
    try:
        resolved, err = validate(yaml.safe_dump(scenario_dict("colocated")), svc.sandbox)
        assert err is None
        runner = sweep_jobs.SweepRunner(svc.config.data_dir)
        with pytest.raises(pdsim.SpecError, match="sweep axis 2") as err:
            runner.start(SID, resolved, [("workload.rate", [1, 2]), ("cluster.colocated.engine.nope", [3])],
                         svc.sandbox.trust)
        assert "nope" in str(err.value)
        assert not list((svc.config.data_dir / sweep_jobs.FOLDER).iterdir())  # nothing left behind
        runner.shutdown()
    finally:
        svc.close()


def test_before_after_rows_say_which_way_is_better():
    rows = {r[0]: r for r in panels.before_after_rows(
        {"goodput_share": 0.2, "mean_ttft_ms": 5000.0, "gpus": 1, "p90_itl_ms": 20.0},
        {"goodput_share": 1.0, "mean_ttft_ms": 70.0, "gpus": 9, "p90_itl_ms": 20.0})}
    assert rows["requests meeting the SLO"][1:] == ("20.0%", "100.0%", "+400.0%", "better")
    assert rows["mean TTFT (ms)"][4] == "better" and rows["GPUs"][4] == "worse"
    assert rows["p90 ITL (ms)"][3:] == ("=", "same")


def test_link_utilisation_is_bytes_moved_over_capacity(prefix_run):
    x, util = link_utilisation(prefix_run, bins=50)
    assert util and len(x) == 50
    rec = prefix_run.record
    width = x[1] - x[0]
    moved = float(np.nansum(rec.requests["transfer_bytes"]))  # every byte of KV sent from P to D
    for name, pct in util.items():
        assert pct.max() <= 100.0 + 1e-6 and pct.min() >= 0.0
    # the bytes the links carried, read back from the % curves, are the KV the requests sent
    # (each transfer crosses the same number of links; here one P->D path)
    carried = sum(float((pct / 100.0 * rec.link_capacity[n]).sum() * width) for n, pct in util.items())
    hops = carried / moved
    assert moved > 0 and abs(hops - round(hops)) < 0.02 and round(hops) >= 1


def test_live_kv_is_apart_from_the_prefix_cache(prefix_run):
    kv = {k.name: k for k in kv_use(prefix_run)}
    p = kv["P0"]
    # after a request's KV left for D its prompt blocks stay cached on P: most of P's pool
    assert p.cached_at_peak > p.live_peak > 0 and p.cached_at_peak <= p.peak
    steps = prefix_run.record.steps[0]
    assert (steps["kv_cached"] <= steps["kv_used"]).all()  # cached pages are pages in use


def test_apply_suggestion_runs_the_overrides_and_refuses_stale_indexes(tmp_path):
    from pdsim.dashboards.validation import validate

    svc = make_services(tmp_path / "data")
    try:
        d = scenario_dict("colocated")
        d["workload"].update(num_requests=200, rate=100.0, input={"dist": "uniform", "min": 1024, "max": 4096})
        resolved, err = validate(yaml.safe_dump(d), svc.sandbox)
        assert err is None
        sid = svc.session(SID)
        job = svc.jobs.start(sid, resolved)
        import time

        t0 = time.time()
        while job.active and time.time() - t0 < 60:
            time.sleep(0.05)
        assert job.status == "done"
        assert "error" in plan_callbacks.apply_suggestion(svc, sid, job.jid, 7, 0)
        assert "error" in plan_callbacks.apply_suggestion(svc, sid, job.jid, "0", 0)
        assert "no longer kept" in plan_callbacks.apply_suggestion(svc, sid, "nope", 0, 0)["error"]
        out = plan_callbacks.apply_suggestion(svc, sid, job.jid, 0, 0)
        assert out["applied"]["base"] == job.jid and out["applied"]["overrides"]
        field, value = out["applied"]["overrides"][0].split("=")
        assert field == "cluster.colocated[0].count"
        assert yaml.safe_load(out["text"])["cluster"]["colocated"][0]["count"] == int(value)
        svc.jobs.cancel(sid, out["jid"])
    finally:
        svc.close()


def test_downloads_are_the_runs_tables_and_launch_text(prefix_run):
    pq = downloads.run_download(prefix_run, "parquet")
    import base64

    df = pd.read_parquet(io.BytesIO(base64.b64decode(pq["content"])))
    assert len(df) == 80 and pq["filename"] == "small-disagg-requests.parquet"
    csv = downloads.run_download(prefix_run, "csv")
    assert len(pd.read_csv(io.StringIO(csv["content"]))) == 80
    with pytest.raises(ValueError):
        downloads.run_download(prefix_run, "xlsx")
    text = downloads.launch_text(prefix_run.scenario, "sglang")  # mooncake transfer: SGLang's P/D
    assert text.startswith("#!/usr/bin/env bash") and "--disaggregation-mode prefill" in text
    with pytest.raises(pdsim.SpecError, match="write SGLang commands"):
        downloads.launch_text(prefix_run.scenario, "vllm")
    assert downloads.safe_name("../../etc/passwd") == "etc_passwd"


def test_a_sweep_over_its_wall_time_limit_is_stopped(tmp_path):
    import time

    from pdsim.dashboards.validation import validate

    svc = make_services(tmp_path / "data")
    runner = sweep_jobs.SweepRunner(svc.config.data_dir, wall_limit_s=0.05)
    patient = sweep_jobs.SweepRunner(svc.config.data_dir)
    try:
        resolved, err = validate(yaml.safe_dump(scenario_dict("colocated")), svc.sandbox)
        first = patient.start(SID, resolved, [("workload.rate", [2, 4])], svc.sandbox.trust)
        with pytest.raises(pdsim.SpecError, match="still in progress"):
            patient.start(SID, resolved, [("workload.rate", [2])], svc.sandbox.trust)
        assert patient.get("another-session-id-000", first.jid) is None  # another page cannot see it
        assert patient.cancel(SID, first.jid) and first.status == "cancelled"
        job = runner.start(SID, resolved, [("workload.rate", [2, 4])], svc.sandbox.trust)
        t0 = time.time()
        while job.active and time.time() - t0 < 20:
            time.sleep(0.05)
        assert job.status == "failed" and "0.05 s limit" in job.error
    finally:
        runner.shutdown()
        patient.shutdown()
        svc.close()
