"""The dashboard in a real headless browser (Debian's chromium + chromedriver via Selenium),
served in-process on 127.0.0.1: empty states, refusals at Validate, a run's named sections
(SLO legend lines, link capacity, a zoomable request-lives chart), cards cleared while a new
run is in progress, Compare, the sweep folder list and a renamed sweep configuration.

Set PDSIM_SCREENSHOTS=DIR to save a screenshot at each step (for a human to look at)."""
from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from pathlib import Path

import pytest

from test_dashboard import make_services, make_sweep

pytestmark = pytest.mark.browser
CHROME = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
DRIVER = shutil.which("chromedriver")
try:
    import selenium  # noqa: F401

    HAVE_SELENIUM = True
except ImportError:
    HAVE_SELENIUM = False
SHOTS = os.environ.get("PDSIM_SCREENSHOTS")
# PDSIM_REQUIRE_BROWSER=1 (e.g. in CI once .ci/extras.sh installed chromium) makes a missing browser a
# failure rather than a skip.
if not (CHROME and DRIVER and HAVE_SELENIUM):
    if os.environ.get("PDSIM_REQUIRE_BROWSER") == "1":
        raise RuntimeError("PDSIM_REQUIRE_BROWSER=1 but chromium, chromedriver or selenium is missing")
    pytest.skip("headless-browser tests need chromium and chromedriver (apt-get install chromium chromium-driver) "
                "and selenium (pip install selenium)", allow_module_level=True)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from werkzeug.serving import make_server

    from pdsim.dashboards.app import create_app

    data = tmp_path_factory.mktemp("dash") / "data"
    svc = make_services(data)
    make_sweep(data / "sweeps" / "tiny")
    server = make_server("127.0.0.1", 0, create_app(services=svc).server, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROME
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1100"):
        opts.add_argument(a)
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    driver.get(f"http://127.0.0.1:{server.server_port}/")
    wait(lambda: "OK:" in text(driver, "build-msg"))
    yield driver, svc
    driver.quit()
    server.shutdown()
    svc.close()


def shot(d, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        d.save_screenshot(str(Path(SHOTS) / f"{name}.png"))


def wait(pred, timeout=30.0):
    t0 = time.time()
    while time.time() - t0 < timeout:
        try:
            if pred():
                return True
        except Exception:  # noqa: BLE001 - element not there yet
            pass
        time.sleep(0.1)
    raise AssertionError("timed out waiting for the page")


def set_input(d, cid, value):
    from selenium.webdriver.common.keys import Keys

    el = d.find_element("id", cid)
    el.send_keys(Keys.CONTROL, "a")
    el.send_keys(Keys.DELETE)
    el.send_keys(str(value), Keys.TAB)


def set_yaml(d, text: str) -> None:
    """Replace the editor's text as typing would (React sees an input event)."""
    d.execute_script("""
        const el = document.getElementById('yaml');
        Object.getOwnPropertyDescriptor(HTMLTextAreaElement.prototype, 'value').set.call(el, arguments[0]);
        el.dispatchEvent(new Event('input', {bubbles: true}));""", text)


def text(d, cid):
    return d.find_element("id", cid).text


def yaml_text(d):
    return d.find_element("id", "yaml").get_attribute("value")


def tab(d, label):
    d.find_element("xpath", f"//*[text()='{label}']").click()


def visible(d, cid) -> bool:
    els = d.find_elements("id", cid)
    return bool(els) and els[0].is_displayed()


def legend(d, graph_id) -> list[str]:
    return [e.text for e in d.find_elements("css selector", f"#{graph_id} .legendtext")]


def test_browser_empty_states_before_any_data(site):
    d, _svc = site
    wait(lambda: "OK:" in text(d, "build-msg"))
    assert d.title == "pdsim dashboard"
    assert "(up to 20 MiB)" in d.find_element("css selector", "#upload button").text  # the limit is visible
    shot(d, "01-build")
    tab(d, "Run & see")
    wait(lambda: "No run yet" in text(d, "run-empty"))
    assert not d.find_elements("css selector", "#results .js-plotly-plot")  # no empty axes
    shot(d, "02-run-empty")
    tab(d, "Compare")
    wait(lambda: "Nothing to compare yet" in text(d, "compare-empty"))
    assert not visible(d, "compare-body")
    shot(d, "03-compare-empty")
    tab(d, "Explore sweeps")
    wait(lambda: "No sweep opened" in text(d, "explore-empty") and "1 sweep result folders" in text(d, "explore-empty"))
    assert not visible(d, "explore-body")
    shot(d, "04-explore-empty")
    tab(d, "Build")


def test_browser_validate_refuses_module_plugins_and_outside_files(site):
    d, _svc = site
    wait(lambda: "name: llama8b-a800-colocated" in yaml_text(d))
    good = yaml_text(d)
    had_this = "this" in sys.modules
    set_yaml(d, good.replace("policy: round_robin", "policy: 'this:Router'"))
    d.find_element("id", "validate").click()
    wait(lambda: "plug-ins from modules are not accepted here" in text(d, "build-msg"))
    assert "module 'this' is not an allowed plug-in source" in text(d, "build-msg")
    assert ("this" in sys.modules) == had_this  # the server (this process) imported nothing
    shot(d, "05-plugin-refused")
    set_yaml(d, good.replace("hardware: a800", "hardware: /etc/passwd"))
    d.find_element("id", "validate").click()
    wait(lambda: "outside the data folders this server may read" in text(d, "build-msg"))
    assert "root:x:0:0" not in d.page_source and "/bin/bash" not in d.page_source
    shot(d, "06-file-refused")
    set_yaml(d, good)
    d.find_element("id", "validate").click()
    wait(lambda: "OK:" in text(d, "build-msg"))


def test_browser_runs_show_named_sections_and_compare(site):
    from selenium.webdriver.common.action_chains import ActionChains

    d, _svc = site
    tab(d, "Build")
    set_input(d, "f-workload-num_requests", 150)
    wait(lambda: "num_requests: 150" in yaml_text(d))
    # a bad input shows the CLI's message next to its field; fixing it clears the message
    set_input(d, "f-c-gpus", 3)
    wait(lambda: "cluster.colocated[0].gpus: 3 GPUs do not divide 8 GPUs per node" in text(d, "f-c-gpus-err"))
    set_input(d, "f-c-gpus", 1)
    wait(lambda: text(d, "f-c-gpus-err") == "" and "OK:" in text(d, "build-msg"))
    # run 1 (colocated): named sections, SLO legend, no links (a note says why), request lives
    d.find_element("id", "build-run").click()
    wait(lambda: "completed requests" in text(d, "cards"))
    assert "Summary of run #1 llama8b-a800-colocated [C1x1g]" in text(d, "res-summary")
    assert "of requests meet the SLO" in text(d, "slo-banner")
    wait(lambda: "SLO TTFT 1000 ms" in legend(d, "g-cdf") and "SLO TPOT 50 ms" in legend(d, "g-cdf"))
    assert "colocated" in text(d, "links-none")
    shot(d, "07-run1-top")
    wait(lambda: len(d.find_elements("css selector", "#g-gantt .barlayer .trace")) >= 1)
    full_title = d.find_element("css selector", "#g-gantt .gtitle").text
    assert "of 150 requests" in full_title
    # zoom: drag the window's start to the right (the slider's number boxes take typed values too)
    thumb = d.find_element("css selector", "#gantt-window .dash-slider-thumb-1")
    d.execute_script("arguments[0].scrollIntoView({block: 'center'})", thumb)
    ActionChains(d).drag_and_drop_by_offset(thumb, 500, 0).perform()
    wait(lambda: "alive in" in d.find_element("css selector", "#g-gantt .gtitle").text)
    start = float(d.find_element("css selector", "#gantt-window .dash-range-slider-min-input").get_attribute("value"))
    assert start > 0 and f"alive in {start:,.1f}" in d.find_element("css selector", "#g-gantt .gtitle").text
    shot(d, "08-run1-lives-zoomed")
    d.execute_script("window.scrollTo(0, 0)")
    d.find_element("id", "pin").click()
    # run 2 (disaggregated): link chart with capacity
    tab(d, "Build")
    d.find_element("xpath", "//label[contains(., 'disaggregated')]").click()
    wait(lambda: "prefill:" in yaml_text(d) and "OK:" in text(d, "build-msg"))
    d.find_element("id", "build-run").click()
    wait(lambda: "#2" in text(d, "progress") and "prefill" in text(d, "res-header"))
    assert "Summary of run #2" in text(d, "res-summary")
    wait(lambda: any(t.startswith("capacity") and "Gbit/s" in t for t in legend(d, "g-links")))
    d.execute_script("document.getElementById('res-links').scrollIntoView()")
    shot(d, "09-run2-links")
    d.execute_script("window.scrollTo(0, 0)")
    d.find_element("id", "pin").click()
    tab(d, "Compare")
    wait(lambda: "#1" in text(d, "compare-table") and "#2" in text(d, "compare-table"))
    wait(lambda: len(d.find_elements("css selector", "#c-cdf .scatterlayer .trace")) >= 8)
    assert not visible(d, "compare-empty") and any(t.startswith("SLO TTFT") for t in legend(d, "c-cdf"))
    shot(d, "10-compare")
    # run 3, long: while it runs, run 2's cards are gone and the page says which run is pending
    tab(d, "Build")
    set_input(d, "f-workload-num_requests", 300000)
    wait(lambda: "num_requests: 300000" in yaml_text(d))
    d.find_element("id", "build-run").click()
    wait(lambda: "Running #3" in text(d, "run-pending"))
    assert not d.find_elements("id", "cards")
    wait(lambda: "requests, simulated" in text(d, "progress"))
    shot(d, "11-run3-pending")
    d.find_element("id", "cancel").click()
    wait(lambda: text(d, "progress") == "cancelled")
    time.sleep(0.6)
    assert text(d, "progress") == "cancelled" and "#2" in text(d, "run-select")  # back to the latest run
    wait(lambda: "Summary of run #2" in text(d, "res-summary"))
    tab(d, "Build")
    set_input(d, "f-workload-num_requests", 150)


def test_browser_explore_lists_sweeps_and_loads_a_renamed_configuration(site):
    d, svc = site
    tab(d, "Explore sweeps")
    wait(lambda: "No sweep opened" in text(d, "explore-empty"))
    make_sweep(svc.config.data_dir / "sweeps" / "later")  # written after the page listed the folders
    d.find_element("id", "refresh-sweeps").click()
    wait(lambda: "2 sweep result folders" in text(d, "explore-empty"))
    d.find_element("id", "sweep-list").click()
    wait(lambda: d.find_element("xpath", "//*[text()='sweeps/later (data folder)']").is_displayed())
    option = "sweeps/tiny (data folder)"
    wait(lambda: d.find_element("xpath", f"//*[text()='{option}']").is_displayed())
    d.find_element("xpath", f"//*[text()='{option}']").click()
    wait(lambda: "4 configurations" in text(d, "sweep-msg"))
    assert visible(d, "explore-body") and not visible(d, "explore-empty")
    wait(lambda: len(d.find_elements("css selector", "#x-pareto .scatterlayer .trace")) >= 1)
    wait(lambda: len(d.find_elements("css selector", "#x-heatmap .heatmaplayer, #x-heatmap .hm")) >= 1)
    wait(lambda: "cfg0002abcd" in text(d, "x-table"))
    shot(d, "12-explore")
    row = [r for r in d.find_elements("css selector", "#x-grid tr") if "cfg0002abcd" in r.text][0]
    row.find_element("css selector", "td.dash-cell.column-0").click()  # the row's "load ▸" cell
    wait(lambda: "sweep configuration cfg0002abcd" in text(d, "build-msg"))
    assert "name: tiny-sweep-cfg0002abcd" in yaml_text(d)
    assert "description: 'sweep tiny-sweep, configuration cfg0002abcd: colocated.chunked_prefill_size=4096" \
        in yaml_text(d)
    assert d.find_element("id", "f-name").get_attribute("value") == "tiny-sweep-cfg0002abcd"
    assert d.find_element("id", "f-c-engine-chunked_prefill_size").get_attribute("value") == "4096"
    assert "llama8b-a800-colocated" not in text(d, "example")  # the example picker no longer claims it
    shot(d, "13-loaded-config")


def test_browser_report_html_draws_with_the_shared_plotly_js_and_says_when_it_is_missing(site, tmp_path):
    import pdsim
    from builders import resolve, scenario_dict
    from test_dashboard_report import report_folder

    d, _svc = site
    runs = {"disagg": pdsim.simulate(resolve(scenario_dict("disagg")))}
    folder = report_folder(tmp_path, runs)
    d.get((folder / "report.html").as_uri())
    wait(lambda: len(d.find_elements("css selector", ".js-plotly-plot")) == 6)  # CDFs ... links, request lives
    assert "was not found next to this report" not in d.page_source.split("<body")[1].split("<script")[0]
    assert not d.find_elements("xpath", "//p[contains(., 'was not found next to this report')]")
    shot(d, "14-report")
    d.get((folder / "alone" / "report.html").as_uri())
    wait(lambda: d.find_elements("xpath", "//p[contains(., 'plotly.min.js was not found next to this report')]"))
    assert not d.find_elements("css selector", ".js-plotly-plot .main-svg")
    shot(d, "15-report-without-js")
