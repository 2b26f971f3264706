"""Dashboard without a browser: form <-> YAML, SpecError routing, uploads, background jobs,
per-session bounds, sweep folders, result sections, callback wiring and the F10 robustness
cases (each a clean message, no exception). Security: test_dashboard_security.py; the
headless browser: test_dashboard_browser.py."""
from __future__ import annotations

import base64
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

import pdsim
from pdsim.dashboards import forms, panels, uploads, views
from pdsim.dashboards.build_callbacks import build_sync, download_file
from pdsim.dashboards.config import DashboardConfig, Limits
from pdsim.dashboards.explore_callbacks import load_request
from pdsim.dashboards.jobs import JobManager
from pdsim.dashboards.run_callbacks import pin_runs, start_run
from pdsim.dashboards.services import Services
from pdsim.dashboards.sessions import Sessions, new_session_id
from pdsim.dashboards.sweeps import config_text
from pdsim.dashboards.validation import validate
from pdsim.metrics.results import Results
from pdsim.specs.scenario import EngineSpec

EXAMPLE = "llama8b-a800-colocated"
SID = new_session_id()  # issued by this process, as the page would get it


def small_yaml(n: int = 60, **over) -> str:
    d = yaml.safe_load(forms.example_yaml(EXAMPLE))
    d["workload"]["num_requests"] = n
    d.update(over)
    return yaml.safe_dump(d, sort_keys=False)


def errors(st: dict) -> dict:
    return {k: v for k, v in {**st["errors"], **{f"sec-{s}": m for s, m in st["sections"].items()}}.items() if v}


def payload(raw: bytes) -> str:
    return "data:application/octet-stream;base64," + base64.b64encode(raw).decode()


def make_services(data: Path, limits: Limits | None = None, roots: tuple = ()) -> Services:
    data.mkdir(parents=True, exist_ok=True)
    return Services.make(DashboardConfig.make(data, roots, limits))


@pytest.fixture
def services(tmp_path):
    svc = make_services(tmp_path / "data")
    yield svc
    svc.close()


def make_sweep(out: Path, status: bool = True) -> Path:
    """A sweep result folder in the format pdsim sweep writes (results.csv + configs/)."""
    (out / "configs").mkdir(parents=True)
    rows = []
    for i, (chunk, mrr) in enumerate([(1024, 32), (1024, 256), (4096, 32), (4096, 256)]):
        cid = f"cfg{i:04d}abcd"
        d = yaml.safe_load(small_yaml(120))
        d["cluster"]["colocated"][0]["engine"].update(chunked_prefill_size=chunk, max_running_requests=mrr)
        (out / "configs" / f"{cid}.yaml").write_text(yaml.safe_dump(d))
        rows.append({"config_id": cid, "cluster.colocated.engine.chunked_prefill_size": chunk,
                     "cluster.colocated.engine.max_running_requests": mrr, "status": "ok",
                     "goodput_share": 0.5 + i / 10, "request_goodput": 2 + i,
                     "output_throughput_per_gpu": 500 + 300 * i,
                     "tokens_per_s_per_user": 70 - 8 * i, "p90_ttft_ms": 100 + 50 * i, "p90_itl_ms": 20.0})
    df = pd.DataFrame(rows)
    if not status:
        df = df.drop(columns=["status"])
    df.to_csv(out / "results.csv", index=False)
    (out / "summary.json").write_text('{"name": "tiny-sweep"}')
    return out


# ---- form <-> scenario ---------------------------------------------------------------------
def test_form_fields_follow_the_spec_dataclasses():
    f = forms.FIELDS
    assert f["f-p-engine-chunked_prefill_size"].default == EngineSpec().chunked_prefill_size
    assert f["f-d-engine-deepep_mode"].kind == "select" and "low_latency" in f["f-d-engine-deepep_mode"].options
    assert f["f-c-enable_dp_attention"].kind == "bool" and f["f-transfer-nic_gbit"].kind == "number"
    assert f["f-workload-input-value"].default == 1024  # WorkloadSpec's default input length
    assert f["f-slo-ttft_ms"].clear == "null"
    for role in ("p", "d", "c"):
        for knob in ("count", "nodes", "gpus", "tp", "dp", "ep", "enable_dp_attention", "engine-max_running_requests",
                     "engine-page_size", "engine-mem_fraction_static"):
            assert f"f-{role}-{knob}" in f


def test_a_control_change_edits_only_its_field_and_round_trips(services):
    data = forms.parse_yaml(small_yaml())
    v = forms.form_values(data)
    assert v["f-layout"] == "colocated" and v["f-c-gpus"] == 1 and v["f-c-engine-chunked_prefill_size"] == 2048
    assert v["f-c-engine-mem_fraction_static"] is None  # absent: the placeholder shows the default
    new = forms.apply_changes(data, {"f-workload-num_requests": 77, "f-c-engine-mem_fraction_static": 0.8})
    assert new["workload"]["num_requests"] == 77
    assert new["cluster"]["colocated"][0]["engine"]["mem_fraction_static"] == 0.8
    back = forms.parse_yaml(forms.dump_yaml(new))
    assert back == new and forms.form_values(back)["f-workload-num_requests"] == 77
    # emptying a control removes the field (spec default), except SLO bounds: null = not checked
    cleared = forms.apply_changes(new, {"f-c-engine-page_size": None, "f-slo-ttft_ms": None})
    assert "page_size" not in cleared["cluster"]["colocated"][0]["engine"]
    assert cleared["slo"]["ttft_ms"] is None and forms.form_values(cleared)["f-slo-ttft_ms"] is None
    assert forms.form_values(forms.parse_yaml("slo: {}"))["f-slo-ttft_ms"] == 2000.0  # absent: default bound
    # nodes and gpus size an instance exclusively: setting one replaces the other in place
    node = forms.apply_changes(data, {"f-c-nodes": 1})["cluster"]["colocated"][0]
    assert list(node)[:2] == ["count", "nodes"] and "gpus" not in node
    # picking a bundled trace means replaying it; it resolves where the examples' traces are
    tr = forms.apply_changes(data, {"f-workload-trace-path": "../traces/azure_code_2023_sample2000.csv"})
    assert tr["workload"]["kind"] == "trace"
    assert validate(forms.dump_yaml(tr), services.sandbox)[1] is None


def test_layout_switch_and_group_notes(services):
    data = forms.parse_yaml(small_yaml())
    dis = forms.apply_changes(data, {"f-layout": "disaggregated"})
    assert set(dis["cluster"]) == {"prefill", "decode"} and forms.layout_of(dis) == "disaggregated"
    assert validate(forms.dump_yaml(dis), services.sandbox)[1] is None
    dis = forms.apply_changes(dis, {"f-d-count": 2, "f-p-engine-chunked_prefill_size": 4096})
    assert dis["cluster"]["decode"][0]["count"] == 2
    assert dis["cluster"]["prefill"][0]["engine"]["chunked_prefill_size"] == 4096
    back = forms.apply_changes(dis, {"f-layout": "colocated"})
    assert set(back["cluster"]) == {"colocated"}
    big = forms.parse_yaml(forms.example_yaml("dsv3-h800-p3x3d4"))
    big["cluster"]["prefill"].append(dict(big["cluster"]["prefill"][0]))
    assert "1 of 2" in forms.group_notes(big)["p"]


# ---- errors: the CLI's SpecError text, shown at the control of its field ---------------------
def _cli_error(**overrides) -> pdsim.SpecError:
    with pytest.raises(pdsim.SpecError) as info:
        pdsim.load_scenario(EXAMPLE, overrides)
    return info.value


def test_spec_errors_are_routed_to_the_offending_control(services):
    def sync(trigger, text, values):
        return build_sync(trigger, text, values, services=services, sid=SID)

    text = build_sync(None, "", {}, EXAMPLE, services=services)["text"]
    st = sync("f-c-gpus", text, {"f-c-gpus": 3})
    cli = _cli_error(**{"cluster.colocated[0].gpus": 3})
    assert not st["ok"] and errors(st) == {"f-c-gpus": st["errors"]["f-c-gpus"]}
    assert st["errors"]["f-c-gpus"].endswith(f"{cli.field}: {cli.message}")  # the CLI's words
    assert "3 GPUs do not divide 8 GPUs per node" in st["errors"]["f-c-gpus"]
    assert "does not divide" in errors(sync("f-c-tp", text, {"f-c-tp": 3}))["f-c-tp"]
    assert "needs enable_dp_attention" in errors(sync("f-c-dp", text, {"f-c-dp": 2}))["f-c-dp"]
    assert "must be > 0" in errors(sync("f-workload-rate", text, {"f-workload-rate": -1}))["f-workload-rate"]
    # a model that does not fit: a group-level error, shown in the group's box
    fit = errors(sync("f-model", text, {"f-model": "deepseek-v3"}))
    assert list(fit) == ["sec-c"] and "does not fit" in fit["sec-c"]
    # kind: trace without a trace: shown at the trace-file control
    assert "needs a trace" in errors(sync("f-workload-kind", text, {"f-workload-kind": "trace"}))[
        "f-workload-trace-path"]
    # unknown fields typed in the YAML editor, and YAML that does not parse
    unk = errors(sync("yaml", text.replace("gpus: 1", "gpus: 1, foo: 2"), {}))
    assert "cluster.colocated[0].foo: unknown field" in unk["sec-c"]
    assert "unknown field" in errors(sync("yaml", text + "\nbogus: 1\n", {}))["sec-general"]
    assert "invalid YAML" in errors(sync("yaml", "a: [", {}))["sec-general"]
    assert "duplicate key" in errors(sync("yaml", text + "\nseed: 3\n", {}))["sec-general"]
    # a control change on unparsable YAML keeps the text and says why
    st = sync("f-c-gpus", "a: [", {"f-c-gpus": 2})
    assert st["text"] == "a: [" and not st["ok"]


def test_a_trace_in_the_data_folder_resolves_and_a_bad_one_is_reported_with_its_line(services):
    data = services.config.data_dir
    (data / "traces").mkdir()
    (data / "traces" / "good.jsonl").write_text('{"timestamp": 0, "input_length": 5, "output_length": 1}\n')
    (data / "traces" / "bad.jsonl").write_text('{"timestamp": 0, "input_length": 5, "output_length": 1}\n'
                                               '{"timestamp": 1, "input_length": 5}\n')
    d = yaml.safe_load(small_yaml())
    d["workload"] = {"kind": "trace", "trace": {"path": "traces/good.jsonl", "format": "mooncake"}}
    assert build_sync("yaml", yaml.safe_dump(d), {}, services=services, sid=SID)["ok"]
    d["workload"]["trace"]["path"] = "traces/bad.jsonl"
    st = build_sync("yaml", yaml.safe_dump(d), {}, services=services, sid=SID)
    msg = errors(st)["f-workload-trace-path"]
    assert "line 2" in msg and "output_length" in msg
    # the data folder's traces are offered by the form, with the bundled ones (not a sweep's .json results)
    make_sweep(data / "sw")
    opts = {o["value"] for o in uploads.trace_options(services.uploads, SID, data)}
    assert {"traces/good.jsonl", "traces/bad.jsonl", "../traces/azure_code_2023_sample2000.csv"} <= opts
    assert not any(o.startswith("sw/") for o in opts)


# ---- uploads -------------------------------------------------------------------------------
TRACE = (b'{"timestamp": 0, "input_length": 100, "output_length": 10}\n'
         b'{"timestamp": 5, "input_length": 50, "output_length": 5}\n')


def test_uploads_are_parsed_safely(services):
    store = services.uploads
    kind, path, n = store.save(SID, payload(TRACE), "../../etc/evil.jsonl")
    p = Path(path)
    assert kind == "trace" and n == 2 and p.parent == store.folder and "evil" not in p.name
    assert p.read_bytes() == TRACE and oct(store.folder.stat().st_mode)[-3:] == "700"
    with pytest.raises(pdsim.SpecError, match="line 1: output_length: missing"):
        store.save(SID, payload(b'{"timestamp": 0, "input_length": 5}\n'), "t.jsonl")
    with pytest.raises(pdsim.SpecError, match="expected a scenario"):
        store.save(SID, payload(b"x"), "t.exe")
    with pytest.raises(pdsim.SpecError, match="upload limit is 20 MiB"):
        store.save(SID, payload(b"0" * (Limits().max_upload_bytes + 1)), "big.csv")
    with pytest.raises(pdsim.SpecError, match="base64"):
        store.save(SID, "data:x;base64,@@@", "t.csv")
    with pytest.raises(pdsim.SpecError, match="not a data URL"):
        store.save(SID, None, None)
    before = set(store.folder.iterdir())
    kind, text, _n = store.save(SID, payload(small_yaml().encode()), "mine.yaml")
    assert kind == "scenario" and "llama" in text and set(store.folder.iterdir()) == before
    # through the Build tab: a trace upload points the workload at it
    st = build_sync("upload", small_yaml(), {}, upload=(payload(TRACE), "my.jsonl"), services=services, sid=SID)
    assert st["ok"] and "kind: trace" in st["text"] and "uploaded trace my.jsonl" in str(st["message"])
    st = build_sync("upload", small_yaml(), {}, upload=(payload(b'{"timestamp": 0}\n'), "bad.jsonl"),
                    services=services, sid=SID)
    assert "bad.jsonl: line 1" in errors(st)["sec-workload"] and st["text"] == small_yaml()
    # no session, no upload
    st = build_sync("upload", small_yaml(), {}, upload=(payload(TRACE), "my.jsonl"), services=services, sid=None)
    assert "reload the page" in errors(st)["sec-workload"]


def test_non_utf8_and_gzip_uploads_get_clean_messages(services):
    store = services.uploads
    for name in ("s.yaml", "t.jsonl", "t.csv"):
        with pytest.raises(pdsim.SpecError) as info:
            store.save(SID, payload(b"\xff\xfe\x00bad bytes\n"), name)
        assert str(info.value).startswith(name) and ("UTF-8" in str(info.value) or "format" in str(info.value))
    import gzip

    with pytest.raises(pdsim.SpecError, match="gzip-compressed; upload the plain YAML"):
        store.save(SID, payload(gzip.compress(small_yaml().encode())), "s.yaml")
    with pytest.raises(pdsim.SpecError, match="not gzip-compressed"):
        store.save(SID, payload(TRACE), "t.jsonl.gz")
    kind, _path, n = store.save(SID, payload(gzip.compress(TRACE)), "t.jsonl.gz")  # the readers decompress it
    assert kind == "trace" and n == 2
    # a gzip bomb is refused before any reader sees it (every codec: test_dashboard_security_clients.py)
    small = uploads.UploadStore(Limits(max_upload_bytes=2**20, max_expanded_bytes=10 * 2**20))
    try:
        with pytest.raises(pdsim.SpecError, match="expands to more than 10 MiB"):
            small.save(SID, payload(gzip.compress(b"\n" * (10 * 2**20 + 10))), "b.jsonl.gz")
        with pytest.raises(pdsim.SpecError, match="not valid gzip"):
            small.save(SID, payload(b"\x1f\x8b" + b"junk" * 10), "x.jsonl")
        assert list(small.folder.iterdir()) == []
    finally:
        small.close()


def test_uploads_are_deleted_when_replaced_failed_forgotten_or_over_the_folder_cap(tmp_path):
    running: set[str] = set()
    store = uploads.UploadStore(Limits(upload_folder_bytes=3 * len(TRACE) + 10), in_use=running.__contains__)
    try:
        _k, first, _n = store.save("a" * 20, payload(TRACE), "one.jsonl")
        _k, second, _n = store.save("a" * 20, payload(TRACE), "two.jsonl")  # replaces one.jsonl
        assert not Path(first).exists() and Path(second).exists()
        assert [u.name for u in store.of_session("a" * 20)] == ["two.jsonl"]
        assert store.of_session("b" * 20) == []  # never shown to another session
        with pytest.raises(pdsim.SpecError):
            store.save("a" * 20, payload(b'{"timestamp": 0}\n'), "bad.jsonl")
        assert sorted(store.folder.iterdir()) == [Path(second)]  # the failed upload is gone
        # a file a run reads is deleted after the run, not before
        running.add(second)
        _k, third, _n = store.save("a" * 20, payload(TRACE), "three.jsonl")
        assert Path(second).exists()
        running.clear()
        store.collect()
        assert not Path(second).exists()
        # the folder cap: the least recently uploaded files go first
        store.save("b" * 20, payload(TRACE), "b.jsonl")
        store.save("c" * 20, payload(TRACE), "c.jsonl")
        store.save("d" * 20, payload(TRACE), "d.jsonl")
        assert store.total_bytes() <= 3 * len(TRACE) + 10 and not Path(third).exists()
        running.update(u.path for u in store.of_session("b" * 20) + store.of_session("c" * 20)
                       + store.of_session("d" * 20))
        with pytest.raises(pdsim.SpecError, match="upload space"):
            store.save("e" * 20, payload(TRACE), "e.jsonl")
        running.clear()
        # a forgotten session's files go
        d_path = store.of_session("d" * 20)[0].path
        store.drop_session("d" * 20)
        assert not Path(d_path).exists()
    finally:
        folder = store.folder
        store.close()
    assert not folder.exists()


# ---- sessions, jobs and pins: per browser session, bounded --------------------------------
def _wait_job(jm, sid, jid, timeout=30.0):
    t0 = time.time()
    while jm.get(sid, jid).active and time.time() - t0 < timeout:
        time.sleep(0.02)
    return jm.get(sid, jid)


def test_sessions_are_bounded_and_forgetting_one_calls_the_listeners():
    clock = [0.0]
    forgotten = []
    s = Sessions(max_sessions=3, idle_s=100.0, clock=lambda: clock[0])
    s.on_forget(forgotten.append)
    ids = [new_session_id() for _ in range(5)]
    assert len(set(ids)) == 5 and all(len(i) == 47 for i in ids)
    for i in ids[:4]:
        s.touch(i)
    assert len(s) == 3 and forgotten == [ids[0]]
    clock[0] = 150.0
    s.touch(ids[4])  # the others are idle for 150 s > 100 s
    assert len(s) == 1 and set(forgotten) == set(ids[:4])
    for bad in (None, "", "short", "x" * 65, "../../etc", 5, {"a": 1}, ids[0][:-1] + ("B" if ids[0].endswith("A") else "A"), "a" * 24 + "." + "b" * 22):
        with pytest.raises(pdsim.SpecError, match="reload the page"):
            s.touch(bad)


def test_jobs_run_in_a_process_per_session_bounded_and_cancel_stops_them(services):
    from pdsim.report.figures import latency_cdf_figure, request_gantt_figure, ttft_breakdown_figure

    jm = JobManager(Limits(runs_per_session=2, runs_total=4, running_total=2))
    try:
        resolved, _e = validate(small_yaml(40), services.sandbox)
        job = _wait_job(jm, "s1" * 8, jm.start("s1" * 8, resolved).jid)
        assert job.status == "done", job.error
        assert job.label == f"#1 {resolved.name}"
        assert isinstance(job.result, Results) and job.result.summary()["completed"] == 40
        assert len(job.result.requests) == 40 and len(job.result.timeline) > 0
        latency_cdf_figure({"a": job.result, "b": job.result}), ttft_breakdown_figure(job.result)
        request_gantt_figure(job.result)
        assert jm.get("s2" * 8, job.jid) is None  # another session cannot see it
        # one run in progress per session, `running_total` on the server
        big, _e = validate(small_yaml(200_000), services.sandbox)
        j1 = jm.start("s1" * 8, big)
        with pytest.raises(pdsim.SpecError, match="still in progress"):
            jm.start("s1" * 8, resolved)
        j2 = jm.start("s2" * 8, big)
        with pytest.raises(pdsim.SpecError, match="its limit"):
            jm.start("s3" * 8, resolved)
        time.sleep(0.3)
        assert jm.get("s1" * 8, j1.jid).status == "running"
        t0 = time.time()
        assert not jm.cancel("s2" * 8, j1.jid)  # not its job
        assert jm.cancel("s1" * 8, j1.jid) and jm.cancel("s2" * 8, j2.jid)
        assert _wait_job(jm, "s1" * 8, j1.jid).status == "cancelled" and time.time() - t0 < 5
        _wait_job(jm, "s2" * 8, j2.jid)
        time.sleep(0.2)
        assert not jm._procs
        # finished runs kept: 2 per session, 4 in all (failed and cancelled ones first, then the least
        # recently used; a session's latest job stays so its page can read how it ended)
        for sid in ("s1" * 8, "s1" * 8, "s3" * 8):
            _wait_job(jm, sid, jm.start(sid, resolved).jid)
        assert [j.label.split()[0] for j in jm.runs("s1" * 8)] == ["#3", "#4"] and len(jm._jobs) == 4
        jm.drop_session("s1" * 8)
        assert jm.runs("s1" * 8) == [] and all(j.sid != "s1" * 8 for j in jm._jobs.values())
    finally:
        jm.shutdown()


def test_a_forgotten_session_loses_its_runs_and_uploads(tmp_path):
    svc = make_services(tmp_path / "data", Limits(max_sessions=1, session_protect_s=0.0))
    try:
        a, b = new_session_id(), new_session_id()
        svc.session(a)
        _k, path, _n = svc.uploads.save(a, payload(TRACE), "a.jsonl")
        resolved, _e = validate(small_yaml(20), svc.sandbox)
        job = _wait_job(svc.jobs, a, svc.jobs.start(a, resolved).jid)
        assert job.status == "done" and Path(path).exists()
        svc.session(b)  # one session at most, and a is not protected (seen 0 s ago at most): a is forgotten
        assert a not in svc.sessions and not Path(path).exists()
        assert svc.jobs.runs(a) == [] and svc.jobs.get(a, job.jid) is None
    finally:
        svc.close()


def test_start_run_refuses_without_a_session_or_a_valid_scenario(services):
    assert "reload the page" in str(start_run(services, None, small_yaml())[1].children)
    assert "module 'os'" in str(start_run(services, SID, small_yaml(router={"policy": "os:abort"}))[1].children)


def test_pins_are_bounded():
    pins, msg = pin_runs(["a", "b", "c"], "d", 3)
    assert pins == ["b", "c", "d"] and "oldest pin was dropped" in msg
    assert pin_runs(["a"], "a", 3) == (["a"], "")
    assert pin_runs(None, None, 3) == ([], "")
    assert pin_runs("junk", 5, 3) == ([], "")


# ---- sweep folders ---------------------------------------------------------------------------
def test_sweep_folders_are_listed_from_the_data_folder_and_opened_only_by_key(tmp_path):
    extra = tmp_path / "elsewhere"
    make_sweep(extra / "sw2")
    svc = make_services(tmp_path / "data", roots=(extra,))
    try:
        make_sweep(tmp_path / "data" / "runs" / "sw1")
        svc.sweeps.refresh()
        opts = svc.sweeps.options()
        labels = [o["label"] for o in opts]
        assert labels == ["runs/sw1 (data folder)", "sw2 (elsewhere)"]
        sw = svc.sweeps.open(opts[0]["value"])
        assert len(sw.df) == 4 and "cluster.colocated.engine.chunked_prefill_size" in sw.knobs
        assert len(sw.axes) == 2 and sw.default_metric() in sw.metrics
        for bad in ("", None, str(tmp_path / "data" / "runs" / "sw1"), "/etc", "0:..", "9:x", ["0:runs/sw1"]):
            with pytest.raises(pdsim.SpecError):
                svc.sweeps.open(bad)
        # a configuration comes back renamed after itself, with its knobs in the description
        text = config_text(sw, "cfg0002abcd")
        data = yaml.safe_load(text)
        assert data["name"] == "tiny-sweep-cfg0002abcd"
        assert data["description"] == ("sweep tiny-sweep, configuration cfg0002abcd: "
                                       "colocated.chunked_prefill_size=4096, colocated.max_running_requests=32")
        assert data["cluster"]["colocated"][0]["engine"]["chunked_prefill_size"] == 4096
        for cid in ("../results", "..", "a/b", "cfg9999abcd", None, 7):
            with pytest.raises(pdsim.SpecError):
                config_text(sw, cid)
        req, err = load_request(svc, opts[0]["value"], "cfg0001abcd")
        assert err is None and "name: tiny-sweep-cfg0001abcd" in req["text"]
        st = build_sync("load-request", "", {}, load=req, services=svc, sid=SID)
        assert st["ok"] and st["clear_example"] and "tiny-sweep-cfg0001abcd" in str(st["message"])
    finally:
        svc.close()


# ---- F10: odd input is a clean message, never an exception ----------------------------------
def test_f10_odd_inputs_give_clean_messages(services, tmp_path):
    # editor text whose `cluster` is a list (an AttributeError and HTTP 500 on every edit before)
    for text in ("cluster: [1, 2]", "- a\n- b", "cluster: 5", "workload: [1]", "slo: 3", "42", "", None, 5,
                 {"cluster": 1}):
        st = build_sync("yaml", text, {}, services=services, sid=SID)
        assert not st["ok"] and len(errors(st)) == 1, text
    assert "cluster: expected a mapping, got a list of 2 items" in str(
        build_sync("yaml", "cluster: [1, 2]", {}, services=services, sid=SID)["message"])
    # a control change while the editor holds a list
    assert "expected a mapping" in str(build_sync("f-c-gpus", "- a", {"f-c-gpus": 2}, services=services)["message"])
    # Download while the editor YAML is a list, or not YAML at all
    assert download_file("- a\n- b") == {"content": "- a\n- b", "filename": "scenario.yaml"}
    assert download_file("a: [")["filename"] == "scenario.yaml" and download_file(None)["content"] == ""
    assert download_file("name: ../../x y\n")["filename"] == "x_y.yaml"
    # Explore: a click with no folder opened, or on a folder that is not listed
    assert load_request(services, None, "cfg0001abcd") == (None, None)
    assert load_request(services, "0:nope", "cfg")[1].startswith("sweep folder:")
    # a results.csv without `status`
    make_sweep(services.config.data_dir / "nostatus", status=False)
    services.sweeps.refresh()
    sw = services.sweeps.open(services.sweeps.options()[0]["value"])
    assert len(sw.ok) == 4 and len(views.sweep_rows(sw, "request_goodput")[1]) == 4
    # an example key that is not a bundled example (a path sent by a client)
    st = build_sync("example", "", {}, "/etc/passwd", services=services)
    assert "no bundled example" in str(st["message"]) and "root" not in str(st["message"])


# ---- results panel: named sections, empty states, SLO legends, link capacity, zoom ----------
@pytest.fixture(scope="module")
def finished_runs():
    """A colocated and a disaggregated run (small, in-process)."""
    from builders import resolve, scenario_dict

    out = {}
    for kind in ("colocated", "disagg"):
        res = pdsim.simulate(resolve(scenario_dict(kind)))
        out[kind] = Results(res.record, res.scenario)
    return out


def _ids(node, out=None) -> dict:
    out = {} if out is None else out
    if isinstance(node, (list, tuple)):
        for c in node:
            _ids(c, out)
        return out
    nid = getattr(node, "id", None)
    if isinstance(nid, str):
        out[nid] = node
    children = getattr(node, "children", None)
    for c in children if isinstance(children, (list, tuple)) else [children]:
        if c is not None and not isinstance(c, (str, int, float)):
            _ids(c, out)
    return out


def test_results_panel_sections_name_the_run_and_explain_what_is_missing(finished_runs):
    col = panels.results_panel(finished_runs["colocated"], "#1 small-colocated [C1x1g]")
    ids = _ids(col)
    keys = [s.id for s in col]
    assert keys == ["res-header", "res-slo", "res-summary", "res-verdicts", "res-instances", "res-latency",
                    "res-ttft", "res-timelines", "res-links", "res-lives"]
    assert ids["verdicts"].children and "verdict" in str(ids["verdicts"].children[-1].className)
    assert ids["res-summary"].children[0].children == "Summary of run #1 small-colocated [C1x1g]"
    assert all(c.title == "#1 small-colocated [C1x1g]" for c in ids["cards"].children)
    assert "g-links" not in ids and "colocated" in str(ids["links-none"].children)
    dis = _ids(panels.results_panel(finished_runs["disagg"], "#2 small-disagg"))
    assert "g-links" in dis and "links-none" not in dis
    names = [t.name for t in dis["g-links"].figure.data]
    assert any(n.startswith("capacity ") and "Gbit/s" in n for n in names)
    slider = dis["gantt-window"]
    assert slider.min == 0 and slider.max > 0 and slider.value == [0.0, slider.max]


def test_slo_lines_are_named_legend_entries(finished_runs):
    from pdsim.report.figures import latency_cdf_figure

    res = finished_runs["disagg"]
    fig = latency_cdf_figure(res)
    slo = [t for t in fig.data if t.name and t.name.startswith("SLO")]
    assert sorted(t.name for t in slo) == ["SLO TPOT 50 ms", "SLO TTFT 2000 ms"]
    assert all(t.showlegend is not False and t.line.dash == "dash" for t in slo)
    # overlaid runs with different bounds: one line per run, named after it
    other = finished_runs["colocated"]
    other_slo = Results(other.record, other.scenario)
    other_slo.record = type(other.record)(**{**other.record.__dict__, "slo": {**other.record.slo, "ttft_ms": 500.0}})
    names = sorted(t.name for t in latency_cdf_figure({"a": res, "b": other_slo}).data if t.name.startswith("SLO"))
    assert names == ["SLO TPOT 50 ms", "SLO TTFT 2000 ms (a)", "SLO TTFT 500 ms (b)"]


def test_link_chart_draws_capacity_and_gantt_zooms_to_a_window(finished_runs):
    from pdsim.report.figures import link_timeline_figure, request_gantt_figure

    res = finished_runs["disagg"]
    fig = link_timeline_figure(res)
    cap = [t for t in fig.data if t.name.startswith("capacity")]
    expected = sorted({round(c * 8 / 1e9, 3) for c in res.record.link_capacity.values()})
    assert sorted(t.y[0] for t in cap) == expected and all(t.line.dash == "dot" for t in cap)
    full = request_gantt_figure(res)
    assert "of 60 requests" in full.layout.title.text
    end = float(res.requests["finish_s"].max())
    win = request_gantt_figure(res, n=5, window=(end / 2, end / 2 + 1.0))
    assert tuple(win.layout.xaxis.range) == (end / 2, end / 2 + 1.0) and "alive in" in win.layout.title.text
    df = res.requests
    alive = df[(df["arrival_s"] < end / 2 + 1.0) & (df["finish_s"] > end / 2)]
    shown = {int(y.split()[1]) for y in win.data[0].y}
    assert len(shown) == min(5, len(alive)) and shown <= set(alive["request_id"])


# ---- wiring -------------------------------------------------------------------------------------
def test_every_callback_id_is_in_the_layout_or_a_result_section(services, finished_runs):
    from pdsim.dashboards.app import create_app

    app = create_app(services=services)
    assert callable(app.layout)  # built per page load: a fresh session id each time
    page = app.layout()
    ids = set(_ids(page)) | set(_ids(panels.results_panel(finished_runs["disagg"], "x")))
    assert _ids(page)["session"].data != _ids(app.layout())["session"].data
    for cb in app.callback_map.values():
        for dep in cb["inputs"] + cb["state"]:
            assert dep["id"] in ids or dep["id"].startswith("{"), dep  # {...}: pattern-matching ids
    for key in app.callback_map:
        for part in key.strip(".").split("..."):
            cid = part.split("@")[0].rsplit(".", 1)[0]
            assert cid in ids or cid.startswith("{"), part
