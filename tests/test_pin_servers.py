"""``validation/cpu-vllm-pd/run_case.py --pin-servers``: every thread of each server's session held
on its own core (the cpu-vllm-emr3-pd-pinned cases: the engine's TTFT fell 3.2-7.9x against the
same requests unpinned, validation/README.md 'Each server on its own core'). Checked on a stand-in
server: a process in a session of its own with threads, and a child started after the pinning
began that widens its own affinity."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from builders import load_script

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                                reason="needs Linux and two CPUs")

SERVER = """import os, subprocess, sys, threading, time
def idle():
    time.sleep(30)
for _ in range(2):
    threading.Thread(target=idle, daemon=True).start()
print("up", flush=True)
input()  # once told, a late process that widens its own affinity (as a worker binding its threads does)
child = subprocess.Popen([sys.executable, "-c",
                          "import os, time; os.sched_setaffinity(0, range(os.cpu_count())); print(1, flush=True); "
                          "time.sleep(30)"], stdout=subprocess.PIPE, text=True)
child.stdout.readline()
print("late", flush=True)
time.sleep(30)
"""




def test_every_thread_of_the_session_stays_on_its_core_threads_started_later_too():
    rc = load_script("validation/cpu-vllm-pd/run_case.py")
    core = max(os.sched_getaffinity(0))
    p = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        assert p.stdout.readline().strip() == "up"
        assert len(rc.session_tasks(p.pid)) == 3  # the main thread and two others; nothing outside the session
        pinner = rc.SessionPinner({p.pid: core}, period_s=0.05)
        assert pinner.pinned == 3
        p.stdin.write("\n")
        p.stdin.flush()
        assert p.stdout.readline().strip() == "late"
        time.sleep(0.3)  # a few periods
        pinner.stop()
        tasks = rc.session_tasks(p.pid)
        assert len(tasks) == 4 and pinner.pinned == 4  # the child's thread, re-pinned
        assert all(os.sched_getaffinity(t) == {core} for t in tasks)
        assert os.sched_getaffinity(0) != {core}  # this process (another session) left alone
    finally:
        p.kill()
        p.wait()
