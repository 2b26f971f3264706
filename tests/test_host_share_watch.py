"""calibration/microbench/host_share.py watch: the host's load around a user's own command (their
pdsim replay), for a server they started themselves: its processes found under its pid."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "calibration" / "microbench" / "host_share.py"
pytestmark = pytest.mark.skipif(not Path("/proc/self/schedstat").exists(), reason="needs Linux /proc schedstat")


def test_watch_reports_server_client_other_and_cores(tmp_path):
    # a stand-in "server": a process with a child, both idle; the command burns a little CPU
    server = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                               "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); "
                               "time.sleep(30)"])
    try:
        import time
        time.sleep(0.5)  # let it start its child
        out = tmp_path / "host.json"
        cmd = [sys.executable, "-c", "import time; t = time.time()\nwhile time.time() - t < 0.6: pass"]
        r = subprocess.run([sys.executable, str(SCRIPT), "watch", "--pid", str(server.pid), "--out", str(out),
                            "--", *cmd], capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        rep = json.loads(out.read_text())
    finally:
        server.kill()
        server.wait()
    names = list(rep["share"]["processes"])
    assert sum(n.startswith("0:") for n in names) == 2  # the server and its child, found by parent pid
    client = [v for k, v in rep["share"]["processes"].items() if k.startswith("client:")]
    assert len(client) == 1 and 0.3 < client[0]["cpu_s"] < 5  # the busy loop's CPU, from its rusage
    assert rep["share"]["client_cpu_s"] == client[0]["cpu_s"]
    assert rep["span_s"] >= 0.6 and rep["background"] == pytest.approx(rep["share"]["other_cpu_s"] / rep["span_s"],
                                                                       abs=1e-3)
    assert any(v["ran_on"] for v in rep["placement"].values())  # sampled every 0.2 s
    assert "host.background" in r.stderr


def test_watch_names_a_pid_that_is_not_there(tmp_path):
    r = subprocess.run([sys.executable, str(SCRIPT), "watch", "--pid", "999999999", "--out", str(tmp_path / "h.json"),
                        "--", "true"], capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "--pid 999999999: no such process" in r.stderr
    assert "Traceback" not in r.stderr
