"""Dashboard security and robustness over HTTP (Flask's test client through the whole Dash
stack, as a browser's requests arrive): plug-in references refused at Validate before any
import, files outside the data folder refused without quoting them, YAML bombs answered at
once, request bodies capped, sessions isolated, no HTTP 500, the exposure warning and no
Werkzeug debugger (issue 10, reliability review SEC-1..8 and F10)."""
from __future__ import annotations

import json
import logging
import resource
import sys
import time

import pytest
import yaml
from builders import free_port
from pdsim.dashboards.app import create_app, request_body_limit
from pdsim.dashboards.exposure import exposure_warning, is_loopback
from test_dashboard import SID, make_services, make_sweep, payload, small_yaml

MARKER_MODULE = "pdsim_test_marker_plugin"


def callback_key(app, first_output: str) -> str:
    for k in app.callback_map:
        if k.strip(".").split("...")[0].split("@")[0] == first_output:
            return k
    raise KeyError(first_output)


def post(client, app, first_output: str | None, values: dict, changed: list[str], key: str | None = None):
    """POST one callback (by its first output, or its ``key`` in the callback map) as the page
    would: ``values`` maps "id.prop" to the value sent."""
    key = key or callback_key(app, first_output)
    cb = app.callback_map[key]
    outs = []
    for part in key.strip(".").split("..."):
        prop_id, _, dup = part.partition("@")
        cid, prop = prop_id.rsplit(".", 1)
        outs.append({"id": cid, "property": prop + (f"@{dup}" if dup else "")})

    def fill(deps):
        return [dict(d, value=values.get(f"{d['id']}.{d['property']}")) for d in deps]

    body = {"output": key, "outputs": outs if key.startswith("..") else outs[0], "inputs": fill(cb["inputs"]),
            "state": fill(cb["state"]), "changedPropIds": changed}
    return client.post("/_dash-update-component", json=body)


def validate_over_http(client, app, text: str):
    """Press Check with ``text`` in the editor; returns (HTTP status, message shown, seconds)."""
    t0 = time.perf_counter()
    r = post(client, app, "yaml.value", {"yaml.value": text, "validate.n_clicks": 1, "session.data": SID,
                                         "example.value": "llama8b-a800-colocated"}, ["validate.n_clicks"])
    dt = time.perf_counter() - t0
    msg = json.dumps(r.get_json()["response"]["build-msg"]) if r.status_code == 200 else r.data.decode()[:300]
    return r.status_code, msg, dt


@pytest.fixture
def served(tmp_path):
    svc = make_services(tmp_path / "data")
    app = create_app(services=svc)
    yield app, app.server.test_client(), svc
    svc.close()


@pytest.fixture
def marker(tmp_path, monkeypatch):
    """An importable module whose import leaves a file behind (the side effect to watch)."""
    mod_dir = tmp_path / "mods"
    mod_dir.mkdir()
    flag = tmp_path / "IMPORTED"
    (mod_dir / f"{MARKER_MODULE}.py").write_text(
        f"open({str(flag)!r}, 'w').write('imported')\n"
        "from pdsim.sim.router import Router\n"
        "class Evil(Router):\n    pass\n")
    monkeypatch.syspath_prepend(str(mod_dir))
    sys.modules.pop(MARKER_MODULE, None)
    return flag


def with_fields(**over) -> str:
    d = yaml.safe_load(small_yaml())
    d.update(over)
    return yaml.safe_dump(d, sort_keys=False)


OFFLOAD = {"tiers": [{"device": "host-dram-pcie5", "capacity_gib": 16}]}


@pytest.mark.parametrize("fields", [
    {"router": {"policy": f"{MARKER_MODULE}:Evil"}},
    {"kv_offload": {**OFFLOAD, "eviction": f"{MARKER_MODULE}:Evil"}},
    {"router": {"policy": "os:abort"}},
    {"kv_offload": {**OFFLOAD, "eviction": "this:X"}},
    {"router": {"policy": "logging:basicConfig",
                "params": {"filename": "PWNED.pth", "filemode": "a", "force": True, "format": "import os"}}},
], ids=["marker-router", "marker-eviction", "os-abort", "this-eviction", "logging-basicConfig"])
def test_module_plugins_are_refused_at_validate_before_any_import(served, marker, fields, tmp_path,
                                                                 monkeypatch):
    app, client, svc = served
    monkeypatch.chdir(tmp_path)
    handlers = list(logging.getLogger().handlers)
    had_this = "this" in sys.modules
    status, msg, _dt = validate_over_http(client, app, with_fields(**fields))
    assert status == 200
    assert "is not an allowed plug-in source: plug-ins from modules are not accepted here" in msg, msg
    assert not marker.exists() and MARKER_MODULE not in sys.modules
    assert ("this" in sys.modules) == had_this
    assert logging.getLogger().handlers == handlers and not (tmp_path / "PWNED.pth").exists()
    # Run refuses the same way (nothing starts)
    r = post(client, app, "active-job.data", {"yaml.value": with_fields(**fields), "run.n_clicks": 1,
                                              "session.data": SID}, ["run.n_clicks"])
    assert r.status_code == 200 and "not an allowed plug-in source" in r.get_data(as_text=True)
    assert svc.jobs.active_count() == 0 and not marker.exists()


def test_files_outside_the_data_folder_are_refused_without_quoting_them(served, tmp_path):
    app, client, svc = served
    secret = tmp_path / "secret.yaml"
    secret.write_text("name: TOPSECRET-LINE-1\nkey: hunter2\n")
    (svc.config.data_dir / "link.yaml").symlink_to(secret)
    trace_secret = tmp_path / "secret.csv"
    trace_secret.write_text("TOPSECRET,COLUMNS\n1,2\n")
    cases = {
        "hardware": with_fields(hardware="/etc/passwd"),
        "model": with_fields(model=str(secret)),
        "model-relative": with_fields(model="../secret.yaml"),
        "model-symlink": with_fields(model="link.yaml"),
        "model-home": with_fields(model="~/.bashrc"),
        "trace": with_fields(workload={"kind": "trace", "trace": {"path": str(trace_secret), "format": "azure"}}),
        "trace-relative": with_fields(workload={"kind": "trace", "trace": {"path": "../secret.csv"}}),
    }
    for name, text in cases.items():
        status, msg, _dt = validate_over_http(client, app, text)
        assert status == 200, name
        assert "outside the data folders this server may read" in msg or "unknown model" in msg \
            or "not found" in msg, (name, msg)
        for leak in ("root:", "TOPSECRET", "hunter2", "/bin/bash"):
            assert leak not in msg, (name, msg)
    # inside the data folder is fine
    (svc.config.data_dir / "t.jsonl").write_text('{"timestamp": 0, "input_length": 5, "output_length": 2}\n')
    status, msg, _dt = validate_over_http(client, app, with_fields(
        workload={"kind": "trace", "trace": {"path": "t.jsonl"}}))
    assert "OK:" in msg, msg


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def test_yaml_bombs_and_deep_nesting_come_back_at_once_with_one_message(served):
    app, client, _svc = served
    # under 700 bytes: 9 levels of 9 aliases, 9**9 (387 million) nodes once expanded
    letters = "abcdefghij"
    bomb = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
        f"{letters[i + 1]}: &{letters[i + 1]} [" + ", ".join([f"*{letters[i]}"] * 9) + "]\n" for i in range(8))
    assert len(bomb) <= 700
    deep = "[" * 10_000 + "]" * 10_000
    deep_map = "".join("  " * i + f"k{i}:\n" for i in range(2000)) + "  " * 2000 + "v: 1\n"
    before = _rss_mb()
    for text, expect in ((bomb, "expands to more than"), (deep, "nesting deeper than 64 levels"),
                         (deep_map, "nesting deeper than 64 levels"), ("x" * (5 * 2**20), "the limit is 4 MiB")):
        status, msg, dt = validate_over_http(client, app, text)
        assert status == 200 and expect in msg and msg.count("msg-err") == 1, msg[:200]
        # expanded, the bomb takes minutes and gigabytes; refused, well under a second on an idle
        # core: 5 s leaves room for a loaded 2-core machine without letting an expansion through
        assert dt < 5.0, (expect, dt)
    assert _rss_mb() - before < 150  # the server's peak memory did not take off


def test_request_bodies_over_the_limit_are_refused_before_reading(served):
    app, client, svc = served
    limit = request_body_limit(svc.config)
    assert app.server.config["MAX_CONTENT_LENGTH"] == limit
    assert limit > svc.config.limits.max_upload_bytes * 4 // 3  # an upload at the limit still fits
    r = client.post("/_dash-update-component", data=b"x" * (limit + 1), content_type="application/json")
    assert r.status_code == 413
    # a file a bit over the limit gets the server's message, and nothing is stored
    big = payload(b"0" * (svc.config.limits.max_upload_bytes + 1000))
    r = post(client, app, "yaml.value", {"upload.contents": big, "upload.filename": "big.csv", "session.data": SID,
                                         "yaml.value": small_yaml()}, ["upload.contents"])
    assert r.status_code == 200 and "big.csv: file is about 20.001 MiB; the upload limit is 20 MiB" in r.get_data(
        as_text=True)
    assert list(svc.uploads.folder.iterdir()) == []


def test_non_utf8_upload_over_http_is_a_clean_message_and_leaves_no_file(served):
    app, client, svc = served
    r = post(client, app, "yaml.value", {"upload.contents": payload(b"\xff\xfe\xfa junk\n"), "upload.filename": "t.jsonl",
                                         "session.data": SID, "yaml.value": small_yaml()}, ["upload.contents"])
    body = r.get_data(as_text=True)
    assert r.status_code == 200 and "t.jsonl: " in body and "UTF-8" in body
    assert list(svc.uploads.folder.iterdir()) == []


def test_unexpected_callback_failures_show_a_line_not_http_500(served, monkeypatch):
    app, client, _svc = served
    from pdsim.dashboards import build_callbacks

    def boom(*_a, **_k):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(build_callbacks, "build_sync", boom)
    r = post(client, app, "yaml.value", {"yaml.value": "a: 1", "validate.n_clicks": 1, "session.data": SID},
             ["validate.n_clicks"])
    assert r.status_code == 200
    side = r.get_json()["sideUpdate"]["app-error"]["children"]
    assert "internal error: ZeroDivisionError" in json.dumps(side) and "Traceback" not in r.get_data(as_text=True)
    # values of the wrong type from a crafted request: a message, not a 500
    monkeypatch.undo()
    r = post(client, app, "yaml.value", {"yaml.value": {"not": "text"}, "f-c-gpus.value": {"x": 1},
                                         "validate.n_clicks": 1, "session.data": ["x"]}, ["validate.n_clicks"])
    assert r.status_code == 200 and "expected YAML text" in r.get_data(as_text=True)


def test_sessions_see_only_their_own_runs_and_uploads(served):
    app, client, svc = served
    other = "other-session-bbbbbbbbbbbb"
    resolved, _ = __import__("pdsim.dashboards.validation", fromlist=["validate"]).validate(small_yaml(30),
                                                                                          svc.sandbox)
    job = svc.jobs.start(SID, resolved)
    t0 = time.time()
    while svc.jobs.get(SID, job.jid).active and time.time() - t0 < 30:
        time.sleep(0.05)
    mine = post(client, app, "results.children", {"run-select.value": job.jid, "session.data": SID},
                ["run-select.value"])
    theirs = post(client, app, "results.children", {"run-select.value": job.jid, "session.data": other},
                  ["run-select.value"])
    assert "Summary of run #1" in mine.get_data(as_text=True)
    assert "Summary of run" not in theirs.get_data(as_text=True) and "no longer kept" in theirs.get_data(as_text=True)
    pinned = post(client, app, "compare-empty.children", {"compare-select.value": [job.jid], "session.data": other},
                  ["compare-select.value"]).get_json()["response"]
    assert "no longer kept" in pinned["compare-empty"]["children"] and pinned["compare-table"]["children"] is None
    opts = post(client, app, "run-select.options", {"session.data": other}, ["session.data"]).get_json()
    assert opts["response"]["run-select"]["options"] == []
    svc.uploads.save(SID, payload(b'{"timestamp": 0, "input_length": 5, "output_length": 2}\n'), "mine.jsonl")
    r = post(client, app, "yaml.value", {"yaml.value": small_yaml(), "validate.n_clicks": 1, "session.data": other},
             ["validate.n_clicks"])
    assert "mine.jsonl" not in r.get_data(as_text=True)


def test_a_sweep_configuration_is_data_loading_it_imports_and_reads_nothing(tmp_path, marker):
    svc = make_services(tmp_path / "data")
    try:
        out = make_sweep(tmp_path / "data" / "sw")
        d = yaml.safe_load((out / "configs" / "cfg0000abcd.yaml").read_text())
        d["router"] = {"policy": f"{MARKER_MODULE}:Evil"}
        d["hardware"] = "/etc/passwd"
        (out / "configs" / "cfg0000abcd.yaml").write_text(yaml.safe_dump(d))
        from pdsim.dashboards.build_callbacks import build_sync
        from pdsim.dashboards.explore_callbacks import load_request

        req, err = load_request(svc, svc.sweeps.options()[0]["value"], "cfg0000abcd")
        assert err is None
        st = build_sync("load-request", "", {}, load=req, services=svc, sid=SID)
        assert not st["ok"] and "outside the data folders" in str(st["message"])
        d["hardware"] = "a800"
        (out / "configs" / "cfg0000abcd.yaml").write_text(yaml.safe_dump(d))
        req, _err = load_request(svc, svc.sweeps.options()[0]["value"], "cfg0000abcd")
        st = build_sync("load-request", "", {}, load=req, services=svc, sid=SID)
        assert "not an allowed plug-in source" in str(st["message"])
        assert not marker.exists() and MARKER_MODULE not in sys.modules
    finally:
        svc.close()


# ---- exposure and the debugger --------------------------------------------------------------
def test_loopback_detection():
    for host in ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"):
        assert is_loopback(host), host
    for host in ("0.0.0.0", "::", "", "192.0.2.2", "10.0.0.1", "no-such-host.invalid"):
        assert not is_loopback(host), host
    assert exposure_warning("127.0.0.1", 8050, "/d") is None
    w = exposure_warning("0.0.0.0", 8050, "/data")
    for part in ("0.0.0.0:8050", "no login", "anyone who can reach this port can run simulations", "/data",
                 "installed packages' 'pdsim.plugins' entry points", "module:Class references are refused"):
        assert part in w, part


@pytest.mark.parametrize("argv,warned", [(["dashboard", "--host", "0.0.0.0"], True),
                                         (["--debug", "dashboard", "--host", "::"], True),
                                         (["--debug", "dashboard"], False)])
def test_dashboard_command_warns_on_exposure_and_never_enables_the_debugger(monkeypatch, capsys, tmp_path,
                                                                          argv, warned):
    import dash

    from pdsim.cli import main

    calls = []
    monkeypatch.setattr(dash.Dash, "run", lambda self, **kw: calls.append(kw))  # record, never bind
    monkeypatch.chdir(tmp_path)
    assert main(argv + ["--port", "8999", "--data", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert ("WARNING: the dashboard will listen on" in err) == warned
    assert f"data folder: {tmp_path}" in err
    (kw,) = calls
    assert kw["debug"] is False and kw["use_reloader"] is False and kw["dev_tools_ui"] is False
    assert kw["host"] == argv[argv.index("--host") + 1] if "--host" in argv else kw["host"] == "127.0.0.1"


def test_dashboard_command_refuses_a_missing_data_folder(capsys, tmp_path):
    from pdsim.cli import main

    assert main(["dashboard", "--data", str(tmp_path / "nope")]) == 2
    assert "--data: not a folder" in capsys.readouterr().err


def test_debug_writes_tracebacks_to_the_server_log_only(tmp_path, monkeypatch, capsys):
    from pdsim.dashboards import build_callbacks
    from pdsim.dashboards.config import DashboardConfig
    from pdsim.dashboards.services import Services

    (tmp_path / "data").mkdir()
    svc = Services.make(DashboardConfig.make(tmp_path / "data", debug=True))
    try:
        app = create_app(services=svc)
        monkeypatch.setattr(build_callbacks, "build_sync", lambda *a, **k: 1 / 0)
        r = post(app.server.test_client(), app, "yaml.value", {"yaml.value": "a: 1", "validate.n_clicks": 1,
                                                               "session.data": SID}, ["validate.n_clicks"])
        assert r.status_code == 200 and "Traceback" not in r.get_data(as_text=True)
        assert "Traceback" in capsys.readouterr().err
    finally:
        svc.close()


def test_the_real_server_answers_a_bomb_at_once_with_bounded_memory_and_has_no_debugger(tmp_path):
    """`pdsim --debug dashboard` as a user starts it (a subprocess on 127.0.0.1), then HTTP; a
    foreign Host header gets 403; SIGTERM removes the upload folder."""
    import os
    import subprocess
    import urllib.error
    import urllib.request

    port = free_port()
    tmp = tmp_path / "tmp"  # the server's TMPDIR: its upload folder is made there
    tmp.mkdir()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), TMPDIR=str(tmp))
    proc = subprocess.Popen([sys.executable, "-m", "pdsim", "--debug", "dashboard", "--port", str(port),
                             "--data", str(tmp_path)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        t0 = time.time()
        while True:
            try:
                assert urllib.request.urlopen(base + "/", timeout=2).status == 200
                break
            except (urllib.error.URLError, ConnectionError):
                assert proc.poll() is None and time.time() - t0 < 60, "the dashboard did not start"
                time.sleep(0.2)
        assert len(list(tmp.glob("pdsim-dashboard-uploads-*"))) == 1
        for host, status in (("attacker.example", 403), (f"localhost:{port}", 200)):  # Host allow-list (SEC-F)
            try:
                req = urllib.request.Request(base + "/", headers={"Host": host})
                got = urllib.request.urlopen(req, timeout=5).status
            except urllib.error.HTTPError as err:
                got = err.code
            assert got == status, host
        for path in ("/console", "/console?__debugger__=yes&cmd=resource&f=debugger.js"):
            try:
                page = urllib.request.urlopen(base + path, timeout=5).read().decode()
            except urllib.error.HTTPError as err:
                page = str(err.code)
            # no Werkzeug debugger: Dash answers unknown paths with its own page (or 404)
            assert "Werkzeug" not in page and "Interactive Console" not in page and "CONSOLE_MODE" not in page
        app = create_app(services=make_services(tmp_path / "shape"))  # only to build the request body
        letters = "abcdefghij"
        bomb = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
            f"{letters[i + 1]}: &{letters[i + 1]} [" + ", ".join([f"*{letters[i]}"] * 9) + "]\n" for i in range(8))

        class _Client:
            def post(self, url, json):  # noqa: A002 - mirrors Flask's test client
                req = urllib.request.Request(base + url, data=__import__("json").dumps(json).encode(),
                                             headers={"Content-Type": "application/json"})
                return urllib.request.urlopen(req, timeout=10)

        t0 = time.perf_counter()
        resp = post(_Client(), app, "yaml.value", {"yaml.value": bomb, "validate.n_clicks": 1, "session.data": SID},
                    ["validate.n_clicks"])
        dt = time.perf_counter() - t0
        body = resp.read().decode()
        assert resp.status == 200 and "expands to more than 1,000,000 nodes" in body and dt < 1.0
        peak_kb = int(next(line.split()[1] for line in open(f"/proc/{proc.pid}/status") if line.startswith("VmHWM")))
        assert peak_kb < 600 * 1024, f"server peak RSS {peak_kb / 1024:.0f} MB"
    finally:
        proc.terminate()  # SIGTERM, as service managers and `timeout` stop it
        _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and list(tmp.glob("pdsim-dashboard-uploads-*")) == []  # cleaned up
    assert "WARNING: the dashboard will listen on" not in err and f"data folder: {tmp_path}" in err
    assert "Debugger is active" not in err and "Restarting with" not in err
