"""One dashboard client against the others (issue 25; reliability review SEC-A..F and the
dashboard's other defects), over HTTP through the whole Dash stack as a browser's requests
arrive (Flask's test client; one live server on 127.0.0.1 for the signal and Host checks):
another client cannot evict a session (made-up ids are refused, issued ones cannot take a live
session's place), cannot starve it (per-session quota, wall-time limit per run, streaming
expansion caps on compressed uploads for every codec the readers accept), cannot probe for
files outside the data folder, and cannot reach the server under a foreign Host name."""
from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
import re
import time
from pathlib import Path

import pytest
import yaml

import pdsim
from pdsim.dashboards import uploads
from pdsim.dashboards.app import create_app
from pdsim.dashboards.config import DashboardConfig, Limits
from pdsim.dashboards.exposure import allowed_hosts, host_name
from pdsim.dashboards.jobs import JobManager
from pdsim.dashboards.services import Services
from pdsim.dashboards.sessions import is_issued, new_session_id
from pdsim.dashboards.validation import validate
from test_dashboard import TRACE, make_services, payload, small_yaml
from test_dashboard_security import post

STATE = {"example.value": "llama8b-a800-colocated"}


def issued_id(client) -> str:
    """The session id the server puts in a freshly loaded page (GET /_dash-layout)."""
    def find(node):
        if isinstance(node, dict):
            if node.get("props", {}).get("id") == "session":
                return node["props"]["data"]
            for v in node.values():
                if (hit := find(v)) is not None:
                    return hit
        elif isinstance(node, list):
            for v in node:
                if (hit := find(v)) is not None:
                    return hit
        return None

    r = client.get("/_dash-layout")
    assert r.status_code == 200
    return find(r.get_json())


def renewed_id(client, app) -> str:
    """A session id the server issues to a page whose id it does not know (cheaper than a page load)."""
    r = post(client, app, "session.data", {"session.data": None}, ["session.data"])
    return r.get_json()["response"]["session"]["data"]


def run_list(client, app, sid) -> list:
    r = post(client, app, "run-select.options", {"session.data": sid}, ["session.data"])
    assert r.status_code == 200
    return r.get_json()["response"]["run-select"]["options"]


def upload(client, app, sid, raw: bytes, name: str) -> str:
    """Upload a file as the Build tab does; the message line shown."""
    r = post(client, app, "yaml.value", {**STATE, "upload.contents": payload(raw), "upload.filename": name,
                                         "yaml.value": small_yaml(), "session.data": sid}, ["upload.contents"])
    assert r.status_code == 200
    return json.dumps(r.get_json()["response"]["build-msg"])


def start(client, app, sid, text: str) -> str:
    """Press Run; the progress line shown."""
    r = post(client, app, "active-job.data", {"run.n_clicks": 1, "yaml.value": text, "session.data": sid},
             ["run.n_clicks"])
    assert r.status_code == 200
    return json.dumps(r.get_json()["response"]["progress"])


def wait_idle(svc, timeout=60.0):
    t0 = time.time()
    while svc.jobs.active_count() and time.time() - t0 < timeout:
        time.sleep(0.05)
    assert svc.jobs.active_count() == 0


@pytest.fixture
def served(tmp_path):
    svc = make_services(tmp_path / "data", Limits(max_sessions=8, sessions_per_client=64))
    app = create_app(services=svc)
    yield app, app.server.test_client(), svc
    svc.close()


# ---- SEC-A: sessions are issued by the server and cannot be evicted by others -------------------
def test_another_client_with_70_ids_cannot_evict_a_sessions_runs_or_uploads(served):
    app, client, svc = served
    a = issued_id(client)
    assert is_issued(a) and issued_id(client) != a
    assert "starting" in start(client, app, a, small_yaml(20))
    wait_idle(svc)
    assert "uploaded trace" in upload(client, app, a, TRACE, "mine.jsonl")
    (upl,) = svc.uploads.of_session(a)
    before = run_list(client, app, a)
    assert len(before) == 1 and before[0]["label"].startswith("#1 ")

    # 70 made-up ids (the review's probe): refused on every callback, remembered nowhere
    for i in range(70):
        assert run_list(client, app, f"{i:024d}.{'x' * 22}") == []
    assert "no valid session; reload the page" in upload(client, app, "session-aaaaaaaaaaaaaaaa", TRACE, "t.jsonl")
    assert len(svc.sessions) == 1 and a in svc.sessions
    # 70 ids the server issued (page loads cost the server nothing) push each other out, not a
    others = [renewed_id(client, app) for _ in range(70)]
    for sid in others:
        assert run_list(client, app, sid) == []
    assert a in svc.sessions and len(svc.sessions) == 8
    # storing runs or uploads under them fills the free places, then is refused
    msgs = [upload(client, app, sid, TRACE, "t.jsonl") for sid in others[:10]]
    assert sum("uploaded trace" in m for m in msgs) == 7  # 8 places, one is a's
    assert all("sessions in use, its limit; try again later" in m for m in msgs[7:])
    assert "the server keeps runs and uploads of 8 sessions" in start(client, app, others[-1], small_yaml(20))
    assert run_list(client, app, a) == before and Path(upl.path).exists()
    assert svc.uploads.of_session(a) == [upl] and a in svc.sessions and len(svc.sessions) == 8


def test_a_session_not_seen_recently_makes_room_but_one_with_a_run_in_progress_never(tmp_path):
    clock = [0.0]
    svc = make_services(tmp_path / "data", Limits(max_sessions=2, session_protect_s=60.0, run_wall_s=30.0))
    svc.sessions._clock = lambda: clock[0]
    try:
        a, b, c = (new_session_id() for _ in range(3))
        resolved, _ = validate(small_yaml(200_000), svc.sandbox)
        svc.session(a)
        job = svc.jobs.start(a, resolved)  # long: in progress throughout
        svc.session(b)
        svc.uploads.save(b, payload(TRACE), "b.jsonl")
        clock[0] = 120.0  # both unseen for longer than session_protect_s
        svc.session(c)
        svc.uploads.save(c, payload(TRACE), "c.jsonl")  # takes b's place (idle, nothing running), not a's
        assert b not in svc.sessions and svc.uploads.of_session(b) == []
        assert a in svc.sessions and svc.jobs.get(a, job.jid).active
        d = new_session_id()
        with pytest.raises(pdsim.SpecError, match="sessions in use, its limit"):
            svc.uploads.save(d, payload(TRACE), "d.jsonl")  # c was seen just now, a is running
    finally:
        svc.close()


def test_an_admitted_session_keeps_its_place_while_it_stores_its_run():
    from pdsim.dashboards.sessions import ADMIT_HOLD_S, Sessions

    clock = [0.0]
    s = Sessions(max_sessions=1, idle_s=1e6, clock=lambda: clock[0], protect_s=600.0)
    s.state_from(lambda sid: False)  # nothing stored yet: another request thread makes room meanwhile
    a, b = new_session_id(), new_session_id()
    s.admit(a)
    s.touch(b)
    assert a in s and b not in s
    with pytest.raises(pdsim.SpecError, match="sessions in use"):
        s.admit(b)
    clock[0] = ADMIT_HOLD_S + 1  # it never stored anything: an empty session gives its place
    s.admit(b)
    assert b in s and a not in s


def test_one_client_address_cannot_take_every_place(tmp_path):
    svc = make_services(tmp_path / "data", Limits(max_sessions=8, sessions_per_client=3))
    app = create_app(services=svc)
    try:
        greedy = app.server.test_client()
        greedy.environ_base["REMOTE_ADDR"] = "10.0.0.9"
        other = app.server.test_client()
        other.environ_base["REMOTE_ADDR"] = "10.0.0.8"
        msgs = [upload(greedy, app, issued_id(greedy), TRACE, "t.jsonl") for _ in range(5)]
        assert [("uploaded trace" in m) for m in msgs] == [True] * 3 + [False] * 2
        assert "this client (10.0.0.9) keeps runs or uploads in 3 sessions, its limit" in msgs[-1]
        assert "uploaded trace" in upload(other, app, issued_id(other), TRACE, "t.jsonl")
    finally:
        svc.close()


def test_a_page_with_an_id_this_server_did_not_issue_gets_a_fresh_one(served):
    app, client, _svc = served
    r = post(client, app, "session.data", {"session.data": "session-aaaaaaaaaaaaaaaa"}, ["session.data"])
    assert r.status_code == 200 and is_issued(r.get_json()["response"]["session"]["data"])
    good = issued_id(client)
    r = post(client, app, "session.data", {"session.data": good}, ["session.data"])
    assert r.status_code == 204  # kept as it is


# ---- SEC-B: no run holds a slot for long, no session holds every slot ------------------------
def test_runs_that_would_take_long_are_stopped_and_cannot_starve_other_sessions(tmp_path):
    from multiprocessing import forkserver

    svc = make_services(tmp_path / "data", Limits(running_total=2, running_per_session=1, run_wall_s=2.0))
    app = create_app(services=svc)
    client = app.server.test_client()
    if svc.jobs._ctx.get_start_method() == "forkserver":
        forkserver.ensure_running()  # the limit is on the run, but keep the test's timeline short
    try:
        long = small_yaml(2_000_000)  # pdsim's request limit: minutes of simulation
        hogs = [issued_id(client) for _ in range(2)]
        assert all("starting" in start(client, app, h, long) for h in hogs)
        assert "still in progress" in start(client, app, hogs[0], long)  # one run per session
        a = issued_id(client)
        assert "the server is running 2 simulations, its limit" in start(client, app, a, small_yaml(20))
        wait_idle(svc, timeout=30.0)  # the wall-time limit frees both slots
        for h in hogs:
            (job,) = [j for j in svc.jobs._jobs.values() if j.sid == h]
            assert job.status == "failed" and job.result is None
            assert job.error.startswith("stopped after 2 s, the time limit of a dashboard run")
        assert "starting" in start(client, app, a, small_yaml(20))
        wait_idle(svc)
        assert len(run_list(client, app, a)) == 1
    finally:
        svc.close()


# ---- SEC-D: the memory of kept results is bounded by requests too ---------------------------
def test_kept_results_are_bounded_by_their_requests(services_small):
    svc = services_small
    jm = JobManager(Limits(kept_requests_total=70, runs_total=8, runs_per_session=8))
    resolved, _ = validate(small_yaml(30), svc.sandbox)
    jobs = []
    try:
        for sid in ("s1" * 8, "s1" * 8, "s2" * 8, "s3" * 8):
            jobs.append(jm.start(sid, resolved))
            while jobs[-1].jid in jm._procs:  # until its watcher has received it and applied the bounds
                time.sleep(0.02)
            if sid == "s2" * 8:  # 90 requests kept > 70: s1's older run goes first
                assert [j.label.split()[0] for j in jm.runs("s1" * 8)] == ["#2"]
        # 90 again, and every run left is a session's latest: the least recently used loses its tables
        assert jm.runs("s1" * 8) == [] and len(jm.runs("s2" * 8)) == len(jm.runs("s3" * 8)) == 1
        dropped = jm.get("s1" * 8, jobs[1].jid)
        assert dropped.status == "done" and dropped.result is None and "at most 70 requests" in dropped.error
        assert sum(len(j.result.record) for j in jm._jobs.values() if j.result is not None) == 60
    finally:
        jm.shutdown()


@pytest.fixture
def services_small(tmp_path):
    svc = make_services(tmp_path / "data")
    yield svc
    svc.close()


# ---- SEC-C: compressed uploads are measured streaming, for every codec -------------------------
def _zstd(data: bytes) -> bytes:
    import pyarrow as pa

    return pa.Codec("zstd").compress(data, asbytes=True)


BOMBS = {  # many concatenated members/streams/frames, as every reader decompresses them all
    "bz2": lambda: bz2.compress(b"a" * 2**20, 9) * 4096,  # 196 kB -> 4 GiB (the review's, 1/10)
    "gzip": lambda: gzip.compress(b" " * 2**20, 9) * 201,  # 211 kB -> 201 MiB (DU-gzip-201MB-expands)
    "xz": lambda: lzma.compress(b"a" * 2**20) * 300,  # 85 kB -> 300 MiB
    "zstd": lambda: _zstd(b"a" * 2**20) * 300,  # 15 kB -> 300 MiB
}


@pytest.mark.parametrize("codec", sorted(BOMBS))
def test_compression_bombs_of_every_codec_are_refused_at_once(served, codec):
    app, client, svc = served
    bomb = BOMBS[codec]()
    sid = issued_id(client)
    t0 = time.perf_counter()
    msg = upload(client, app, sid, bomb, "t.jsonl")
    dt = time.perf_counter() - t0
    assert re.search(f"t.jsonl: the {codec} file expands to more than [0-9.]+ MiB", msg) and "smaller trace" in msg
    assert dt < 10.0, dt  # 16 MiB decompressed, not 4 GiB (152 s before)
    assert list(svc.uploads.folder.iterdir()) == []  # nothing kept
    # the same codec with an honest trace is read
    honest = {"bz2": bz2.compress, "gzip": gzip.compress, "xz": lzma.compress, "zstd": _zstd}[codec](TRACE)
    assert "uploaded trace t.jsonl: 2 requests" in upload(client, app, sid, honest, "t.jsonl")


def test_expansion_caps_size_ratio_and_time(tmp_path):
    from pdsim.dashboards.expansion import check_expansion, expansion_cap

    lim = Limits(max_expanded_bytes=8 * 2**20, max_expansion_ratio=10.0, expansion_floor_bytes=2**20)
    assert expansion_cap(10, lim) == 2**20 and expansion_cap(2**20, lim) == 8 * 2**20
    assert expansion_cap(400 * 1024, lim) == 4000 * 1024
    p = tmp_path / "t"
    p.write_bytes(gzip.compress(TRACE) * 3)  # three members, all counted
    assert check_expansion(p, "t.jsonl", lim) == 3 * len(TRACE)
    with pytest.raises(pdsim.SpecError, match="took more than 0 s"):
        check_expansion(p, "t.jsonl", Limits(max_decompress_s=0.0))
    p.write_bytes(bz2.compress(TRACE)[:-8])  # truncated
    with pytest.raises(pdsim.SpecError, match="t.jsonl: the file starts like bz2 data but is not valid bz2"):
        check_expansion(p, "t.jsonl", lim)
    p.write_bytes(TRACE)
    assert check_expansion(p, "t.jsonl", lim) == len(TRACE)
    store = uploads.UploadStore(lim)
    try:
        with pytest.raises(pdsim.SpecError, match="xz-compressed; upload the plain YAML"):
            store.save("s" * 20, payload(lzma.compress(small_yaml().encode())), "s.yaml")
    finally:
        store.close()


# ---- SEC-E: no file-existence oracle outside the data folder ------------------------------------
def _validate_msg(svc, data: dict) -> str:
    _r, err = validate(yaml.safe_dump(data), svc.sandbox)
    return str(err)


def test_paths_outside_the_data_folder_get_one_message_whether_they_exist_or_not(services_small, tmp_path):
    svc = services_small
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "present.yaml").write_text("name: x\n")
    (outside / "present.jsonl").write_bytes(TRACE)
    base = yaml.safe_load(small_yaml())

    def spec(draft):
        d = yaml.safe_load(small_yaml())
        d["cluster"]["colocated"][0]["engine"]["speculative"] = {
            "method": "eagle", "num_steps": 1, "topk": 1, "num_draft_tokens": 2, "draft_model": draft}
        return d

    cases = {
        "hardware": lambda ref: {**base, "hardware": ref},
        "model": lambda ref: {**base, "model": ref},
        "workload.trace.path": lambda ref: {**base, "workload": {"kind": "trace", "trace": {"path": ref}}},
        "cluster.colocated[0].engine.speculative.draft_model": spec,
    }
    for field, make in cases.items():
        ext = ".jsonl" if "trace" in field else ".yaml"
        for how in ("absolute", "relative"):
            msgs = []
            for name in ("present", "missing"):
                target = outside / f"{name}{ext}"
                ref = str(target) if how == "absolute" else os.path.relpath(target, svc.config.data_dir)
                msg = _validate_msg(svc, make(ref))
                msgs.append(_without_ref(msg))
                assert f"{field}: " in msg and "is outside the data folders this server may read" in msg, msg
            assert msgs[0] == msgs[1], (field, how, msgs)


def _without_ref(msg: str) -> str:
    """``msg`` with the quoted reference taken out. The reference is quoted as a short excerpt, cut
    where the tmp path's length puts the cut (into the file's name on some runs, under pytest-xdist's
    per-worker tmp folders for one): the rest of the message must not depend on the file."""
    return re.sub(r"'.*?(?= is outside)", "REF", msg)


def test_probing_over_http_learns_nothing_about_files_or_other_sessions(served, tmp_path):
    from test_dashboard_security import validate_over_http

    app, client, svc = served
    (tmp_path / "present.yaml").write_text("name: x\n")
    for field in ("hardware", "model"):
        shown = []
        for name in ("present", "missing"):
            d = {**yaml.safe_load(small_yaml()), field: str(tmp_path / f"{name}.yaml")}
            status, msg, _dt = validate_over_http(client, app, yaml.safe_dump(d))
            assert status == 200 and "is outside the data folders this server may read" in msg
            shown.append(_without_ref(msg))
        assert shown[0] == shown[1]
    # another session's runs: not listed, not readable by job id, not cancellable
    a, b = issued_id(client), issued_id(client)
    assert "starting" in start(client, app, a, small_yaml(20))
    wait_idle(svc)
    (job,) = svc.jobs.runs(a)
    assert run_list(client, app, b) == []
    r = post(client, app, "results.children", {"run-select.value": job.jid, "session.data": b}, ["run-select.value"])
    assert job.label not in r.get_data(as_text=True)
    cancel = next(k for k, cb in app.callback_map.items() if {"id": "cancel", "property": "n_clicks"} in cb["inputs"])
    r = post(client, app, None, {"cancel.n_clicks": 1, "active-job.data": job.jid, "session.data": b},
             ["cancel.n_clicks"], key=cancel)
    assert "no run in progress" in r.get_data(as_text=True) and svc.jobs.runs(a) == [job]


# ---- Validate refuses what Run refuses ----------------------------------------------------------
def test_validate_refuses_a_draft_model_the_run_would_refuse(services_small):
    svc = services_small
    d = yaml.safe_load(small_yaml())
    eng = d["cluster"]["colocated"][0]["engine"]
    eng["speculative"] = {"method": "eagle", "num_steps": 1, "topk": 1, "num_draft_tokens": 2,
                          "draft_model": "tiny-llama"}
    assert validate(yaml.safe_dump(d), svc.sandbox)[1] is None
    eng["speculative"]["draft_model"] = "no-such-draft.yaml"
    msg = _validate_msg(svc, d)
    assert "cluster.colocated[0].engine.speculative.draft_model: unknown model 'no-such-draft.yaml'" in msg
    (svc.config.data_dir / "broken.yaml").write_text("name: [1, 2\n")
    eng["speculative"]["draft_model"] = "broken.yaml"
    assert "engine.speculative.draft_model" in _validate_msg(svc, d)


# ---- SEC-F: Host allow-list -------------------------------------------------------------------
def test_requests_for_another_host_name_are_refused(tmp_path):
    assert host_name("[::1]:8050") == "::1" and host_name("LocalHost.:80") == "localhost"
    assert host_name("::1") == "::1" and host_name("") == ""
    svc = Services.make(DashboardConfig.make(tmp_path, host="192.0.2.7", allow_hosts=("dash.example",)))
    app = create_app(services=svc)
    client = app.server.test_client()
    try:
        for host in ("localhost", "127.0.0.1:8050", "[::1]:8050", "192.0.2.7:8050", "dash.example", "DASH.example"):
            assert client.get("/", headers={"Host": host}).status_code == 200, host
        for host in ("attacker.example", "attacker.example:8050", "127.0.0.1.attacker.example", "localhost.evil",
                     "192.0.2.8"):
            r = client.get("/_dash-layout", headers={"Host": host})
            assert r.status_code == 403 and b"--allow-host" in r.data, host
        r = client.post("/_dash-update-component", json={}, headers={"Host": "attacker.example"})
        assert r.status_code == 403
    finally:
        svc.close()
    assert "localhost" in allowed_hosts("0.0.0.0") and len(allowed_hosts("0.0.0.0")) > 3  # + this machine's names
    with pytest.raises(pdsim.SpecError, match="--allow-host: '\\*' is not a host name"):
        DashboardConfig.make(tmp_path, allow_hosts=("*",))


# ---- the server process: --host '' (SIGTERM and Host on a real socket: test_dashboard_security.py) ----
def test_empty_host_is_refused_clearly(capsys, tmp_path):
    from pdsim.cli import main

    assert main(["dashboard", "--host", "", "--data", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--host: empty bind address" in err and "WARNING" not in err
    from pdsim.dashboards.app import serve

    with pytest.raises(pdsim.SpecError, match="--host: empty bind address"):
        serve(DashboardConfig.make(tmp_path), host=" ")  # the API refuses it too, before serving
