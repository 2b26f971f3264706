"""A vLLM server (or the P/D proxy) whose start-up is interrupted (Ctrl-C while waiting for it to
answer) or fails is stopped again: a context manager's __exit__ never runs when __enter__ raises,
so without this a user's Ctrl-C during the minute-long start-up left an orphan server behind."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from pdsim.replay import local_server
from pdsim.replay.local_server import PDProxy, VLLMServer


def _sleeper(tmp_path):
    # stands in for the venv's python: ignores vLLM's arguments and never answers
    exe = tmp_path / "python"
    exe.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(60)\n")
    exe.chmod(0o755)
    return exe


def test_an_interrupted_start_up_stops_the_server(tmp_path, monkeypatch):
    srv = VLLMServer(_sleeper(tmp_path), tmp_path, 1)

    def interrupt(self):
        raise KeyboardInterrupt
    monkeypatch.setattr(VLLMServer, "ready", interrupt)
    with pytest.raises(KeyboardInterrupt):
        with srv:
            pass
    assert srv.proc is not None and srv.proc.poll() is not None  # stopped, not left running


def test_a_timed_out_start_up_stops_the_server(tmp_path, monkeypatch):
    srv = VLLMServer(_sleeper(tmp_path), tmp_path, 1, startup_s=0.3)
    monkeypatch.setattr(local_server.time, "sleep", lambda s: None)
    with pytest.raises(TimeoutError, match="did not answer"):
        with srv:
            pass
    assert srv.proc.poll() is not None


def test_an_interrupted_proxy_start_up_stops_the_proxy(tmp_path, monkeypatch):
    px = PDProxy(_sleeper(tmp_path), "http://127.0.0.1:1", "http://127.0.0.1:2", 1)

    def interrupt(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(local_server.urllib.request, "urlopen", interrupt)
    with pytest.raises(KeyboardInterrupt):
        with px:
            pass
    assert px.proc.poll() is not None


def test_run_case_names_a_load_without_a_rate_before_starting_servers(tmp_path):
    import subprocess
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "validation" / "cpu-vllm-pd" / "run_case.py"
    r = subprocess.run([sys.executable, str(script), "--python", str(_sleeper(tmp_path)), "--model", str(tmp_path),
                        "--loads", "knee"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "--loads knee: no default rate and size" in r.stderr
    assert "--rate and --requests" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("flags, words", [(["--rate", "-1", "--requests", "10"], "--rate: expected req/s > 0, got -1"),
                                          (["--rate", "0.5", "--requests", "0"], "--requests: expected >= 1, got 0")])
def test_run_case_names_a_bad_rate_or_size_before_starting_servers(tmp_path, flags, words):
    import subprocess
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "validation" / "cpu-vllm-pd" / "run_case.py"
    r = subprocess.run([sys.executable, str(script), "--python", str(_sleeper(tmp_path)), "--model", str(tmp_path),
                        "--loads", "knee", *flags], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and words in r.stderr and "Traceback" not in r.stderr


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_server_that_exits_during_start_up_leaves_no_process_of_its_group(tmp_path):
    # vLLM's API server dies (its log: a bad argument, an OOM kill) after it started its engine core:
    # the engine core (same process group) went on running, since stop() only acted on a live leader
    from pathlib import Path as P

    exe = tmp_path / "python"
    exe.write_text(f"#!{sys.executable}\nimport subprocess, sys\n"
                   f"c = subprocess.Popen([{sys.executable!r}, '-c', 'import time; time.sleep(60)'])\n"
                   f"open({str(tmp_path / 'child')!r}, 'w').write(str(c.pid))\nsys.exit(1)\n")
    exe.chmod(0o755)
    srv = VLLMServer(exe, tmp_path, 1)
    with pytest.raises(RuntimeError, match="exited with status 1 during start-up"):
        with srv:
            pass
    child = int(P(tmp_path / "child").read_text())
    try:
        assert not _alive(child)
    finally:
        if _alive(child):
            os.kill(child, 9)
