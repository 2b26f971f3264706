"""The PyTorch microbenchmark harness (calibration/microbench): tiny CPU shapes with --dry-run,
rows in the data schema with provenance. Skipped without torch (an optional extra)."""
from __future__ import annotations

import importlib.util
import subprocess
import sys

import pandas as pd
import pytest

from pdsim.calibrate import data
from pdsim.specs import catalog

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                reason="torch not installed (pip install 'pdsim[calibration]')")


@pytest.mark.parametrize("script, name", [("gemm.py", "gemm"), ("attention.py", "attention"), ("moe.py", "moe"),
                                          ("forward.py", "forward")])
def test_microbench_dry_run_writes_schema_rows(tmp_path, script, name):
    root = catalog.calibration_dir().parent
    r = subprocess.run([sys.executable, f"calibration/microbench/{script}", "--dry-run", "--repeat", "1",
                        "--out", str(tmp_path)], capture_output=True, text=True, cwd=root)
    assert r.returncode == 0, r.stderr
    df = pd.read_csv(tmp_path / f"{name}.csv")
    assert list(df.columns) == data.columns(name)
    assert len(df) >= 2 and (df["source"] == "dry-run (not a measurement)").all()
    assert df["software"].str.contains("torch").all() and df["date"].notna().all() and (df["us"] > 0).all()


def test_mla_models_get_mla_shapes(tmp_path):
    """DeepSeek (MLA, FP8): attention.py times absorbed-MLA decode and non-absorbed MHA prefill
    into mla.csv, gemm.py the MLA projections, forward.py refuses a standard-attention forward."""
    root = catalog.calibration_dir().parent
    model = "workloads/models/deepseek-v3.yaml"

    def run(script, *extra):
        return subprocess.run([sys.executable, f"calibration/microbench/{script}", "--model", model, "--dry-run",
                               "--repeat", "1", "--out", str(tmp_path), *extra], capture_output=True, text=True, cwd=root)
    assert run("attention.py", "--tp", "8").returncode == 0
    mla = pd.read_csv(tmp_path / "mla.csv")
    assert list(mla.columns) == data.columns("mla") and set(mla["phase"]) == {"prefill", "decode"}
    assert run("gemm.py").returncode == 0
    notes = " ".join(pd.read_csv(tmp_path / "gemm.csv")["note"])
    assert "kv_b_proj" in notes and "q_a_proj" in notes and "qkv" not in notes
    r = run("forward.py")
    assert r.returncode != 0 and "attention: mla" in r.stderr


def test_pdsim_core_imports_without_torch():
    code = ("import sys; sys.modules['torch'] = None; import pdsim, pdsim.calibrate.fit, pdsim.calibrate.report; "
            "print(pdsim.costs.COST_MODELS)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
