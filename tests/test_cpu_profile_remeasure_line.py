"""A re-measured CPU profile's ``machine.remeasure`` line repeats the bounds it was measured with,
so a user who copies it measures the same rows (the defaults run B = 32 x 1,024-token prompts,
far longer on a host without bf16 GEMM units). Fitted from the rows committed for this check."""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
ROWS = ROOT / "validation" / "cpu-vllm-calibration" / "newuser"


def test_the_remeasure_line_carries_the_bounds(tmp_path):
    for f in ("machine.json", "gemm.csv", "attention.csv", "overhead.json"):
        shutil.copy(ROWS / f, tmp_path / f)
    sys.path.insert(0, str(ROOT / "calibration" / "microbench"))
    try:
        from cpu_profile_fit import profile
    finally:
        sys.path.remove(str(ROOT / "calibration" / "microbench"))
    out = tmp_path / "p.yaml"
    profile(argparse.Namespace(out=str(tmp_path), model=str(ROOT / "workloads/models/tiny-llama.yaml"), name="cpu-t",
                               yaml=str(out), fresh=True, bounds="--repeat 5 --repeats 3 --batches 1 4 16"))
    line = yaml.safe_load(out.read_text())["machine"]["remeasure"]
    assert "cpu_profile.py remeasure" in line and "--repeat 5 --repeats 3 --batches 1 4 16" in line
