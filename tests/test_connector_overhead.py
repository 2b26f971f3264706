"""calibration/microbench/connector_overhead.py refuses what it cannot run with, in one line, before
it starts four vLLM servers (the measurement itself needs the engine: its figures are in
validation/cpu-vllm-calibration/*/host-contention/connector_overhead.json)."""
from __future__ import annotations

import subprocess
import sys

from pdsim.specs import catalog

SCRIPT = catalog.calibration_dir().parent / "calibration" / "microbench" / "connector_overhead.py"


def test_a_missing_venv_is_named_with_exit_2(tmp_path):
    r = subprocess.run([sys.executable, str(SCRIPT), "--python", str(tmp_path / "nope" / "python"), "--model",
                        str(tmp_path), "--out", str(tmp_path / "t"), "--json", str(tmp_path / "c.json")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--python" in r.stderr and "no such file or folder" in r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "t").exists()
