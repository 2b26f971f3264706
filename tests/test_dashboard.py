"""Dashboard: form <-> YAML, SpecError routing, safe uploads, background jobs, sweep folders,
callback wiring; then a real headless browser (Debian's chromium + chromedriver via Selenium)."""
from __future__ import annotations

import base64
import shutil
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

import pdsim
from pdsim.dashboards import forms, uploads
from pdsim.dashboards.callbacks import build_sync
from pdsim.dashboards.jobs import JobManager, RunSnapshot
from pdsim.dashboards.sweeps import config_text, open_sweep
from pdsim.specs.scenario import EngineSpec

EXAMPLE = "llama8b-a800-colocated"


def small_yaml(n: int = 60, **over) -> str:
    d = yaml.safe_load(forms.example_yaml(EXAMPLE))
    d["workload"]["num_requests"] = n
    d.update(over)
    return yaml.safe_dump(d, sort_keys=False)


def errors(st: dict) -> dict:
    return {k: v for k, v in {**st["errors"], **{f"sec-{s}": m for s, m in st["sections"].items()}}.items() if v}


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


def test_a_control_change_edits_only_its_field_and_round_trips():
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
    # picking a trace file means replaying it
    tr = forms.apply_changes(data, {"f-workload-trace-path": "../traces/azure_code_2023_sample2000.csv"})
    assert tr["workload"]["kind"] == "trace"
    assert forms.validate(forms.dump_yaml(tr))[1] is None


def test_layout_switch_and_group_notes():
    data = forms.parse_yaml(small_yaml())
    dis = forms.apply_changes(data, {"f-layout": "disaggregated"})
    assert set(dis["cluster"]) == {"prefill", "decode"} and forms.layout_of(dis) == "disaggregated"
    assert forms.validate(forms.dump_yaml(dis))[1] is None
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


def test_spec_errors_are_routed_to_the_offending_control():
    text = build_sync(None, "", {}, EXAMPLE)["text"]
    st = build_sync("f-c-gpus", text, {"f-c-gpus": 3})
    cli = _cli_error(**{"cluster.colocated[0].gpus": 3})
    assert not st["ok"] and errors(st) == {"f-c-gpus": st["errors"]["f-c-gpus"]}
    assert st["errors"]["f-c-gpus"].endswith(f"{cli.field}: {cli.message}")  # the CLI's words
    assert "3 GPUs do not divide 8 GPUs per node" in st["errors"]["f-c-gpus"]
    assert "does not divide" in errors(build_sync("f-c-tp", text, {"f-c-tp": 3}))["f-c-tp"]
    assert "needs enable_dp_attention" in errors(build_sync("f-c-dp", text, {"f-c-dp": 2}))["f-c-dp"]
    assert "must be > 0" in errors(build_sync("f-workload-rate", text, {"f-workload-rate": -1}))["f-workload-rate"]
    # a model that does not fit: a group-level error, shown in the group's box
    fit = errors(build_sync("f-model", text, {"f-model": "deepseek-v3"}))
    assert list(fit) == ["sec-c"] and "does not fit" in fit["sec-c"]
    # kind: trace without a trace: shown at the trace-file control
    assert "needs a trace" in errors(build_sync("f-workload-kind", text, {"f-workload-kind": "trace"}))[
        "f-workload-trace-path"]
    # unknown fields typed in the YAML editor, and YAML that does not parse
    unk = errors(build_sync("yaml", text.replace("gpus: 1", "gpus: 1, foo: 2"), {}))
    assert "cluster.colocated[0].foo: unknown field" in unk["sec-c"]
    assert "unknown field" in errors(build_sync("yaml", text + "\nbogus: 1\n", {}))["sec-general"]
    assert "invalid YAML" in errors(build_sync("yaml", "a: [", {}))["sec-general"]
    # a control change on unparsable YAML keeps the text and says why
    st = build_sync("f-c-gpus", "a: [", {"f-c-gpus": 2})
    assert st["text"] == "a: [" and not st["ok"]


def test_unparsable_trace_file_is_reported_with_its_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 5, "output_length": 1}\n{"timestamp": 1, "input_length": 5}\n')
    d = yaml.safe_load(small_yaml())
    d["workload"] = {"kind": "trace", "trace": {"path": str(bad), "format": "mooncake"}}
    st = build_sync("yaml", yaml.safe_dump(d), {})
    msg = errors(st)["f-workload-trace-path"]
    assert "line 2" in msg and "output_length" in msg


# ---- uploads -------------------------------------------------------------------------------
def _payload(raw: bytes) -> str:
    return "data:application/octet-stream;base64," + base64.b64encode(raw).decode()


def test_uploads_are_parsed_safely():
    raw = (b'{"timestamp": 0, "input_length": 100, "output_length": 10}\n'
           b'{"timestamp": 5, "input_length": 50, "output_length": 5}\n')
    kind, path, n = uploads.save_upload(_payload(raw), "../../etc/evil.jsonl")
    p = Path(path)
    assert kind == "trace" and n == 2 and p.parent == uploads.upload_dir() and "evil" not in p.name
    assert p.read_bytes() == raw
    with pytest.raises(pdsim.SpecError, match="line 1: output_length: missing"):
        uploads.save_upload(_payload(b'{"timestamp": 0, "input_length": 5}\n'), "t.jsonl")
    with pytest.raises(pdsim.SpecError, match="expected a scenario"):
        uploads.save_upload(_payload(b"x"), "t.exe")
    with pytest.raises(pdsim.SpecError, match="upload limit"):
        uploads.save_upload(_payload(b"0" * (uploads.MAX_UPLOAD_BYTES + 1)), "big.csv")
    with pytest.raises(pdsim.SpecError, match="base64"):
        uploads.save_upload("data:x;base64,@@@", "t.csv")
    before = set(uploads.upload_dir().iterdir())
    kind, text, _n = uploads.save_upload(_payload(small_yaml().encode()), "mine.yaml")
    assert kind == "scenario" and "llama" in text and set(uploads.upload_dir().iterdir()) == before
    # through the Build tab: a trace upload points the workload at it
    st = build_sync("upload", small_yaml(), {}, upload=(_payload(raw), "my.jsonl"))
    assert st["ok"] and "kind: trace" in st["text"] and "uploaded trace my.jsonl" in str(st["message"])
    st = build_sync("upload", small_yaml(), {}, upload=(_payload(b'{"timestamp": 0}\n'), "bad.jsonl"))
    assert "bad.jsonl: line 1" in errors(st)["sec-workload"] and st["text"] == small_yaml()


# ---- background jobs ---------------------------------------------------------------------
def _wait_job(jm, jid, timeout=30.0):
    t0 = time.time()
    while jm.get(jid).active and time.time() - t0 < timeout:
        time.sleep(0.02)
    return jm.get(jid)


def test_jobs_run_in_a_process_and_cancel_stops_them():
    from pdsim.report.figures import latency_cdf_figure, request_gantt_figure, ttft_breakdown_figure

    jm = JobManager()
    resolved, _e = forms.validate(small_yaml(40))
    job = _wait_job(jm, jm.start(resolved, "small"))
    assert job.status == "done", job.error
    assert isinstance(job.result, RunSnapshot) and job.result.summary()["completed"] == 40
    assert len(job.result.requests) == 40 and len(job.result.timeline) > 0
    latency_cdf_figure({"a": job.result, "b": job.result}), ttft_breakdown_figure(job.result)
    request_gantt_figure(job.result)
    big, _e = forms.validate(small_yaml(200_000))
    jid = jm.start(big)
    time.sleep(0.5)
    assert jm.get(jid).status == "running"
    t0 = time.time()
    assert jm.cancel(jid)
    job = _wait_job(jm, jid)
    assert job.status == "cancelled" and time.time() - t0 < 5
    time.sleep(0.2)
    assert jid not in jm._procs
    jm.shutdown()


# ---- sweep folders ---------------------------------------------------------------------------
def make_sweep(out: Path) -> Path:
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
    pd.DataFrame(rows).to_csv(out / "results.csv", index=False)
    return out


def test_sweep_folders_open_only_result_folders_and_known_config_ids(tmp_path):
    sw = open_sweep(str(make_sweep(tmp_path / "sw")))
    assert len(sw.df) == 4 and "cluster.colocated.engine.chunked_prefill_size" in sw.knobs
    assert len(sw.axes) == 2 and sw.default_metric() in sw.metrics
    assert "chunked_prefill_size: 4096" in config_text(str(sw.path), "cfg0002abcd")
    for bad in ("", str(tmp_path / "nope"), str(tmp_path), "/etc/passwd"):
        with pytest.raises(pdsim.SpecError):
            open_sweep(bad)
    for cid in ("../results", "..", "a/b", "cfg9999abcd"):
        with pytest.raises(pdsim.SpecError):
            config_text(str(sw.path), cid)


def test_every_callback_id_is_in_the_layout():
    from pdsim.dashboards.app import create_app

    app = create_app(jobs=JobManager())
    ids: set[str] = set()

    def walk(node):
        if hasattr(node, "id") and isinstance(getattr(node, "id", None), str):
            ids.add(node.id)
        children = getattr(node, "children", None)
        for c in children if isinstance(children, (list, tuple)) else [children]:
            if c is not None and not isinstance(c, (str, int, float)):
                walk(c)

    walk(app.layout)
    for cb in app.callback_map.values():
        for dep in cb["inputs"] + cb["state"]:
            assert dep["id"] in ids or dep["id"].startswith("{"), dep  # {...}: pattern-matching ids
    for key in app.callback_map:
        for part in key.strip(".").split("..."):
            cid = part.split("@")[0].rsplit(".", 1)[0]
            assert cid in ids or cid.startswith("{"), part


# ---- a real headless browser -------------------------------------------------------------
CHROME = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
DRIVER = shutil.which("chromedriver")
try:
    import selenium  # noqa: F401

    HAVE_SELENIUM = True
except ImportError:
    HAVE_SELENIUM = False


@pytest.fixture(scope="module")
def browser():
    if not (CHROME and DRIVER and HAVE_SELENIUM):
        pytest.skip("headless-browser test needs chromium and chromedriver (apt-get install chromium "
                    "chromium-driver) and selenium (pip install selenium)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from werkzeug.serving import make_server

    from pdsim.dashboards.app import create_app

    jobs = JobManager()
    server = make_server("127.0.0.1", 0, create_app(jobs=jobs).server, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROME
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1200"):
        opts.add_argument(a)
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    driver.get(f"http://127.0.0.1:{server.server_port}/")
    yield driver
    driver.quit()
    server.shutdown()
    jobs.shutdown()


def _wait(pred, timeout=30.0):
    t0 = time.time()
    while time.time() - t0 < timeout:
        try:
            if pred():
                return True
        except Exception:  # noqa: BLE001 - element not there yet
            pass
        time.sleep(0.1)
    raise AssertionError("timed out waiting for the page")


def _set_input(driver, cid, value):
    from selenium.webdriver.common.keys import Keys

    el = driver.find_element("id", cid)
    el.send_keys(Keys.CONTROL, "a")
    el.send_keys(Keys.DELETE)
    el.send_keys(str(value), Keys.TAB)


def _text(driver, cid):
    return driver.find_element("id", cid).text


def _tab(driver, label):
    driver.find_element("xpath", f"//*[text()='{label}']").click()


def test_browser_build_run_see_compare_and_bad_input(browser):
    d = browser
    _wait(lambda: "OK:" in _text(d, "build-msg"))
    assert d.title == "pdsim dashboard"
    assert "name: llama8b-a800-colocated" in d.find_element("id", "yaml").get_attribute("value")
    # a field change reaches the scenario YAML
    _set_input(d, "f-workload-num_requests", 150)
    _wait(lambda: "num_requests: 150" in d.find_element("id", "yaml").get_attribute("value"))
    # a bad input shows the CLI's message next to its field; fixing it clears the message
    _set_input(d, "f-c-gpus", 3)
    _wait(lambda: "cluster.colocated[0].gpus: 3 GPUs do not divide 8 GPUs per node" in _text(d, "f-c-gpus-err"))
    assert "do not divide" in _text(d, "build-msg")
    _set_input(d, "f-c-gpus", 1)
    _wait(lambda: _text(d, "f-c-gpus-err") == "" and "OK:" in _text(d, "build-msg"))
    # a run (from Build) switches to Run & see and fills the cards and the charts
    d.find_element("id", "build-run").click()
    _wait(lambda: "completed requests" in _text(d, "cards"))
    assert "150" in _text(d, "cards") and "of requests meet the SLO" in _text(d, "slo-banner")
    _wait(lambda: len(d.find_elements("css selector", "#g-cdf .scatterlayer .trace")) >= 4)
    _wait(lambda: len(d.find_elements("css selector", "#g-gantt .barlayer .trace")) >= 1)
    d.find_element("id", "pin").click()
    # a second run with a different layout, pinned and overlaid on Compare
    _tab(d, "Build")
    d.find_element("xpath", "//label[contains(., 'disaggregated')]").click()
    _wait(lambda: "prefill:" in d.find_element("id", "yaml").get_attribute("value") and "OK:" in _text(d, "build-msg"))
    d.find_element("id", "build-run").click()
    _wait(lambda: "#2" in _text(d, "progress") and "prefill" in _text(d, "run-header"))
    d.find_element("id", "pin").click()
    _tab(d, "Compare")
    _wait(lambda: "#1" in _text(d, "compare-table") and "#2" in _text(d, "compare-table"))
    _wait(lambda: len(d.find_elements("css selector", "#c-cdf .scatterlayer .trace")) >= 8)
    # a long run shows progress and Cancel stops it
    _tab(d, "Build")
    _set_input(d, "f-workload-num_requests", 300000)
    _wait(lambda: "num_requests: 300000" in d.find_element("id", "yaml").get_attribute("value"))
    d.find_element("id", "build-run").click()
    _wait(lambda: "requests, simulated" in _text(d, "progress"))
    d.find_element("id", "cancel").click()
    _wait(lambda: _text(d, "progress") == "cancelled")
    time.sleep(0.6)
    assert _text(d, "progress") == "cancelled" and "#2" in _text(d, "run-select")  # still showing run 2


def test_browser_explore_opens_a_sweep_and_loads_a_configuration(browser, tmp_path):
    d = browser
    out = make_sweep(tmp_path / "sweep")
    _tab(d, "Explore sweeps")
    _set_input(d, "sweep-dir", str(tmp_path / "missing"))
    _wait(lambda: "no such folder" in _text(d, "sweep-msg"))
    _set_input(d, "sweep-dir", str(out))
    _wait(lambda: "4 configurations" in _text(d, "sweep-msg"))
    _wait(lambda: len(d.find_elements("css selector", "#x-pareto .scatterlayer .trace")) >= 1)
    _wait(lambda: len(d.find_elements("css selector", "#x-heatmap .heatmaplayer, #x-heatmap .hm")) >= 1)
    _wait(lambda: "cfg0002abcd" in _text(d, "x-table"))
    row = [r for r in d.find_elements("css selector", "#x-table tr") if "cfg0002abcd" in r.text][0]
    row.find_element("css selector", "button.load").click()
    _wait(lambda: "sweep configuration cfg0002abcd" in _text(d, "build-msg"))
    assert "chunked_prefill_size: 4096" in d.find_element("id", "yaml").get_attribute("value")
    assert d.find_element("id", "f-c-engine-chunked_prefill_size").get_attribute("value") == "4096"
