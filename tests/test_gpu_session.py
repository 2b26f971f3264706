"""The one-process GPU session (calibration/microbench/gpu_session.py, issue 28): its CPU
--dry-run runs every family (GEMM, grouped MoE, attention, copies/launch, whole and mixed forward,
overlap) and
writes each family's rows in the data schema, marked as no measurement. Skipped without torch
(an optional extra), like the other microbenchmark tests."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pandas as pd
import pytest

from pdsim.calibrate import data
from pdsim.specs import catalog

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                reason="torch not installed (pip install 'pdsim[calibration]')")


def test_gpu_session_dry_run_writes_every_family(tmp_path):
    root = catalog.calibration_dir().parent
    r = subprocess.run([sys.executable, "calibration/microbench/gpu_session.py", "--dry-run", "--repeat", "1",
                        "--out", str(tmp_path)], capture_output=True, text=True, cwd=root,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "failed families: none" in r.stdout
    for name in ("gemm", "moe", "attention", "memcopy", "launch", "forward"):
        df = pd.read_csv(tmp_path / f"{name}.csv")
        assert list(df.columns) == data.columns(name), name
        assert len(df) >= 2 and (df["source"] == "dry-run (not a measurement)").all(), name
        assert df["note"].str.contains("command: ").all() and df["software"].str.contains("torch").all(), name
        assert (df["us"] > 0).all(), name
    gemm = pd.read_csv(tmp_path / "gemm.csv")
    assert {"bf16"} <= set(gemm["dtype"]) and gemm["note"].str.contains("weights cold").all()
    moe = pd.read_csv(tmp_path / "moe.csv")
    assert set(moe["distribution"]) == {"balanced", "zipf1"} and (moe.loc[moe["distribution"] != "balanced", "fit"] == "no").all()
    att = pd.read_csv(tmp_path / "attention.csv")
    assert set(att["phase"]) == {"prefill", "decode"} and att["note"].str.contains("backend").all()
    fwd = pd.read_csv(tmp_path / "forward.csv")
    assert set(fwd["phase"]) == {"prefill", "decode", "mixed"}
    ov = pd.read_csv(tmp_path / "overlap.csv")
    assert list(ov.columns) == data.columns("overlap") and (ov["source"] == "dry-run (not a measurement)").all()
    assert {0, 24} <= set(ov["held_sms"]) and {"none", "proxy_spin_w32", "proxy_copy_t64_w32"} <= set(ov["beside"])
    assert ov["kernel"].str.startswith("proxy_").any() and (ov["us"] > 0).all()


def test_gpu_session_refuses_unknown_family(tmp_path):
    root = catalog.calibration_dir().parent
    r = subprocess.run([sys.executable, "calibration/microbench/gpu_session.py", "--dry-run", "--only", "gemm,nope",
                        "--out", str(tmp_path)], capture_output=True, text=True, cwd=root)
    assert r.returncode != 0 and "--only" in r.stderr and "nope" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("args", [["--budget-s", "0"], ["--budget-s", "-5"], ["--budget-s", "nan"], ["--repeat", "0"]])
def test_gpu_session_refuses_a_budget_or_repeat_that_measures_nothing(tmp_path, args):
    """A budget of 0 s (or negative, NaN) skipped every point and wrote a session of no rows."""
    root = catalog.calibration_dir().parent
    r = subprocess.run([sys.executable, "calibration/microbench/gpu_session.py", "--dry-run", *args,
                        "--out", str(tmp_path)], capture_output=True, text=True, cwd=root)
    assert r.returncode == 2 and args[0] in r.stderr and "Traceback" not in r.stderr
    assert not list(tmp_path.iterdir())
