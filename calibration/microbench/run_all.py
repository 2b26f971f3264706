"""Run every microbenchmark for the bundled models (GPU), appending to calibration/data.

    python calibration/microbench/run_all.py --hardware h100 [--out calibration/data] [--dry-run]
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent


def main() -> None:
    extra = sys.argv[1:]
    for script, model in [("gemm.py", "llama-3.1-8b"), ("gemm.py", "deepseek-v3"), ("attention.py", "llama-3.1-8b"),
                          ("attention.py", "deepseek-v3"), ("moe.py", "deepseek-v3"), ("forward.py", "llama-3.1-8b")]:
        cmd = [sys.executable, str(HERE / script), "--model", str(HERE.parent.parent / "workloads" / "models" / f"{model}.yaml")]
        subprocess.run(cmd + extra, check=True)


if __name__ == "__main__":
    main()
