"""calibration/microbench/host_share.py watch: the host's load around a user's own command (their
pdsim replay), for a server they started themselves: its processes found under its pid."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from builders import load_script

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
        # burns 0.5 CPU s whatever else runs (a wall-clock loop got 0.2 CPU s under nice 19 on a busy host)
        cmd = [sys.executable, "-c", "import time; t = time.time()\nwhile time.process_time() < 0.5: pass\n"
               "time.sleep(max(0.0, 0.6 - (time.time() - t)))"]
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
    # the reported figures give it back to its rounding (it divided the unrounded span before: 0.983 against
    # 0.984 in a CI rehearsal, 2026-11-28)
    assert rep["span_s"] >= 0.6 and rep["background"] == pytest.approx(rep["share"]["other_cpu_s"] / rep["span_s"],
                                                                       abs=5e-4)
    assert any(v["ran_on"] for v in rep["placement"].values())  # sampled every 0.2 s
    assert "host.background" in r.stderr


def test_watch_names_a_pid_that_is_not_there(tmp_path):
    r = subprocess.run([sys.executable, str(SCRIPT), "watch", "--pid", "999999999", "--out", str(tmp_path / "h.json"),
                        "--", "true"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "--pid 999999999: no such process" in r.stderr
    assert "Traceback" not in r.stderr


def _watch(tmp_path, pid: int, cmd: list[str]) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / "host.json"
    r = subprocess.run([sys.executable, str(SCRIPT), "watch", "--pid", str(pid), "--out", str(out), "--", *cmd],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return r, json.loads(out.read_text())


def test_a_server_process_that_exits_during_the_watch_keeps_its_cpu(tmp_path):
    # the "server" has a child that burns 0.5 CPU s, then exits while the command still runs: its
    # CPU is the server's (up to its last 0.2 s sample), not other work on the host (host.background)
    child = "import time; time.sleep(0.8)\nwhile time.process_time() < 0.5: pass"
    server = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                               f"c = subprocess.Popen([sys.executable, '-c', {child!r}]); c.wait(); time.sleep(30)"])
    try:
        import time
        time.sleep(0.4)
        r, rep = _watch(tmp_path, server.pid, [sys.executable, "-c", "import time; time.sleep(3)"])
    finally:
        server.kill()
        server.wait()
    procs = rep["share"]["processes"]
    gone = [k for k in procs if k.startswith("0:") and k != f"0:python[{server.pid}]"]
    assert len(gone) == 1 and procs[gone[0]]["cpu_s"] > 0.2  # counted, not dropped into other_cpu_s
    assert rep["exited"] == gone and "exited during the command" in r.stderr
    assert rep["share"]["engine_cpu_s"] >= procs[gone[0]]["cpu_s"]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_the_command_affinity_is_the_one_it_ran_with(tmp_path):
    # a client pinned by `taskset -c 1 pdsim replay ...` sets its affinity just after it starts: read at
    # the spawn it showed [0, 1] (three of the six host.json of the here-azure/multiturn cases)
    cpu = min(os.sched_getaffinity(0))
    cmd = [sys.executable, "-c", f"import os, time; os.sched_setaffinity(0, {{{cpu}}}); time.sleep(0.8)"]
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        _, rep = _watch(tmp_path, server.pid, cmd)
    finally:
        server.kill()
        server.wait()
    client = [v for k, v in rep["placement"].items() if k.startswith("client:")]
    assert client[0]["affinity"] == [cpu]


@pytest.mark.parametrize("out, cmd, words", [
    ("no-such-dir/h.json", ["true"], "--out no-such-dir/h.json: no folder no-such-dir"),  # known before the run
    ("h.json", ["no-such-command-pdsim"], "no-such-command-pdsim: no such command"),
])
def test_watch_names_bad_arguments_in_one_line(tmp_path, out, cmd, words):
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        r = subprocess.run([sys.executable, str(SCRIPT), "watch", "--pid", str(server.pid), "--out", out, "--", *cmd],
                           capture_output=True, text=True, timeout=30, cwd=tmp_path)
    finally:
        server.kill()
        server.wait()
    assert r.returncode == 2 and words in r.stderr and "Traceback" not in r.stderr


def test_the_core_sampler_counts_every_threads_cpu_on_its_core():
    """A process whose main thread sleeps while another thread spins: ``ran_on`` (the main thread's
    core) says where it sleeps, ``cpu_s_on`` puts the spinning thread's CPU seconds on its core."""
    import time

    hs = load_script(SCRIPT)
    core = min(os.sched_getaffinity(0))
    code = ("import os, threading, time\nos.sched_setaffinity(0, {%d})\n"
            "def spin():\n    t = time.process_time()\n    while time.process_time() - t < 1.2: pass\n"
            "threading.Thread(target=spin, daemon=True).start()\ntime.sleep(30)\n" % core)
    p = subprocess.Popen([sys.executable, "-c", code])
    try:
        time.sleep(0.1)
        sampler = hs.CoreSampler({p.pid: "spinner"}, period_s=0.1)
        time.sleep(1.5)
        rep = sampler.stop()[f"spinner[{p.pid}]"]
    finally:
        p.kill()
        p.wait()
    assert set(rep["cpu_s_on"]) <= {str(core)}  # every thread was held to that core
    assert rep["cpu_s_on"].get(str(core), 0.0) >= 0.5  # the spinning thread's CPU, not the sleeping main thread's
