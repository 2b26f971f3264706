"""Dashboard: form/YAML helpers, safe uploads, background jobs, and a real headless browser."""
from __future__ import annotations

import base64
import shutil
import threading
import time

import pytest
import yaml

from pdsim.dashboards import forms
from pdsim.dashboards.jobs import JobManager


def small_yaml(n: int = 60) -> str:
    d = yaml.safe_load(forms.example_yaml("llama8b-a800-colocated"))
    d["workload"]["num_requests"] = n
    return yaml.safe_dump(d)


def test_form_round_trip_and_apply():
    data = forms.parse_yaml(small_yaml())
    v = forms.form_values(data)
    assert v["f-c-gpus"] == 1 and v["f-chunk"] == 2048 and v["f-hardware"] == "a800"
    new = forms.apply_form(data, {**v, "f-nreq": 77, "f-chunk": 4096})
    assert new["workload"]["num_requests"] == 77
    assert new["cluster"]["colocated"][0]["engine"]["chunked_prefill_size"] == 4096


def test_validation_message_is_routed_to_the_offending_control():
    data = forms.parse_yaml(small_yaml())
    bad = forms.apply_form(data, {"f-c-gpus": 3})
    resolved, msg, control = forms.validate(yaml.safe_dump(bad))
    assert resolved is None and "3 GPUs do not divide 8 GPUs per node" in msg and control == "f-c-gpus"
    _r, msg, control = forms.validate("hardware: [unclosed")
    assert "invalid YAML" in msg


def _payload(raw: bytes) -> str:
    return "data:application/octet-stream;base64," + base64.b64encode(raw).decode()


def test_upload_is_parsed_safely_with_a_generated_name():
    raw = b'{"timestamp": 0, "input_length": 100, "output_length": 10}\n{"timestamp": 5, "input_length": 50, "output_length": 5}\n'
    path, n = forms.save_upload(_payload(raw), "../../etc/evil.jsonl")
    assert n == 2 and path.parent == forms.UPLOAD_DIR and "evil" not in path.name
    with pytest.raises(Exception, match="line 1: output_length: missing"):
        forms.save_upload(_payload(b'{"timestamp": 0, "input_length": 5}\n'), "t.jsonl")
    with pytest.raises(Exception, match="expected a .jsonl"):
        forms.save_upload(_payload(b"x"), "t.exe")
    with pytest.raises(Exception, match="limit"):
        forms.save_upload(_payload(b"0" * (forms.MAX_UPLOAD_BYTES + 1)), "big.csv")


def test_jobs_run_and_cancel():
    jm = JobManager()
    resolved, _m, _c = forms.validate(small_yaml(40))
    jid = jm.start(resolved)
    for _ in range(200):
        if jm.get(jid).status != "running":
            break
        time.sleep(0.05)
    assert jm.get(jid).status == "done" and jm.get(jid).result.summary()["completed"] == 40
    big, _m, _c = forms.validate(small_yaml(200_000))
    jid = jm.start(big)
    time.sleep(0.3)
    jm.cancel(jid)
    for _ in range(400):
        if jm.get(jid).status != "running":
            break
        time.sleep(0.05)
    assert jm.get(jid).status == "cancelled"


# ---- a real headless browser -------------------------------------------------------------
CHROME = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
DRIVER = shutil.which("chromedriver")
try:
    HAVE_SELENIUM = True
except ImportError:
    HAVE_SELENIUM = False


@pytest.fixture(scope="module")
def browser():
    if not (CHROME and DRIVER and HAVE_SELENIUM):
        pytest.skip("needs chromium, chromedriver and selenium (see .ci/extras.sh)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from werkzeug.serving import make_server

    from pdsim.dashboards.app import create_app

    server = make_server("127.0.0.1", 0, create_app().server, threaded=True)
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


def _wait(pred, timeout=60.0):
    t0 = time.time()
    while time.time() - t0 < timeout:
        try:
            if pred():
                return True
        except Exception:  # noqa: BLE001 - element not there yet
            pass
        time.sleep(0.2)
    raise AssertionError("timed out waiting for the page")


def _set_input(driver, cid, value):
    from selenium.webdriver.common.keys import Keys

    el = driver.find_element("id", cid)
    el.send_keys(Keys.CONTROL, "a")
    el.send_keys(Keys.DELETE)
    el.send_keys(str(value), Keys.TAB)


def test_browser_page_field_change_run_and_bad_input(browser):
    d = browser
    _wait(lambda: "llama8b-a800-colocated" in d.find_element("id", "yaml").get_attribute("value"))
    assert d.title == "pdsim dashboard"
    # a field change reaches the scenario
    _set_input(d, "f-nreq", 80)
    d.find_element("id", "apply-form").click()
    _wait(lambda: "num_requests: 80" in d.find_element("id", "yaml").get_attribute("value"))
    _wait(lambda: "OK:" in d.find_element("id", "build-msg").text)
    # a run updates the summary cards and the charts
    d.find_element("xpath", "//*[text()='Run & see']").click()
    d.find_element("id", "run").click()
    _wait(lambda: "completed requests" in d.find_element("id", "cards").text)
    assert "80" in d.find_element("id", "cards").text
    _wait(lambda: len(d.find_elements("css selector", "#g-cdf .scatterlayer .trace")) >= 4)
    # a bad input shows its message next to the field
    d.find_element("xpath", "//*[text()='Build']").click()
    _set_input(d, "f-c-gpus", 3)
    d.find_element("id", "apply-form").click()
    _wait(lambda: "3 GPUs do not divide 8 GPUs per node" in d.find_element("id", "f-c-gpus-err").text)


def test_browser_explore_tab_loads_a_sweep_and_a_point(browser, tmp_path):
    from pdsim.explore import run_sweep
    from pdsim.specs.catalog import workloads_dir

    out = tmp_path / "sweep"
    run_sweep(workloads_dir() / "sweeps" / "llama8b-a800.yaml", out, workers=1, progress=False)
    d = browser
    d.find_element("xpath", "//*[text()='Explore sweeps']").click()
    _set_input(d, "sweep-dir", str(out))
    _wait(lambda: "8 configurations" in d.find_element("id", "sweep-msg").text)
    _wait(lambda: len(d.find_elements("css selector", "#x-pareto .scatterlayer .trace")) >= 1)
    _wait(lambda: len(d.find_elements("css selector", "#x-heatmap .hm, #x-heatmap .heatmaplayer")) >= 1 or
          len(d.find_elements("css selector", "#x-heatmap svg")) >= 1)
