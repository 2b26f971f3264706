"""Pool workers die with their parent (review F-ORPH: SIGKILL to `pdsim sweep --workers 2` left
both workers re-parented to init, alive 9 minutes later, holding the caller's pipes)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from builders import scenario_dict

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def _children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(d.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_killing_the_sweep_cli_ends_its_workers(tmp_path):
    base = scenario_dict("colocated")
    base["workload"]["num_requests"] = 400
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump({"base": "base.yaml", "axes": [
        {"field": "workload.rate", "values": [float(r) for r in range(2, 42, 2)]}]}))
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    # the CLI in its own session so the test can kill it alone (not its process group)
    proc = subprocess.Popen([sys.executable, "-m", "pdsim", "sweep", "sweep.yaml", "--out", "o", "--workers", "2"],
                            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    workers: list[int] = []
    try:
        deadline = time.time() + 30
        while time.time() < deadline and len(workers) < 2:
            assert proc.poll() is None, "the sweep ended before its workers started"
            workers = _children(proc.pid)
            time.sleep(0.05)
        assert len(workers) >= 2, workers
    finally:
        proc.send_signal(signal.SIGKILL)  # the CLI only, as a wrapper's timeout would
        proc.wait()
    deadline = time.time() + 10
    while time.time() < deadline and any(_alive(w) for w in workers):
        time.sleep(0.05)
    left = [w for w in workers if _alive(w)]
    for w in left:  # never leave them behind, even when the test fails
        os.kill(w, signal.SIGKILL)
    assert not left, f"workers {left} outlived the sweep CLI"
