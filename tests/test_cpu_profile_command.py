"""A re-measured CPU profile's provenance names the command that ran (machine.json ``command``,
the profile's ``sources.provenance``). ``remeasure`` runs ``measure`` by the script's absolute path,
so the committed profiles said where the checkout lay (/work/...); paths inside the checkout are
written repository-relative, paths outside it as they ran."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_command_names_paths_inside_the_checkout_relative_to_it(tmp_path):
    sys.path.insert(0, str(ROOT / "calibration" / "microbench"))
    try:
        from cpu_profile import command_line
    finally:
        sys.path.remove(str(ROOT / "calibration" / "microbench"))
    line = command_line([str(ROOT / "calibration/microbench/cpu_profile.py"), "measure", "--out",
                         str(ROOT / "validation/cpu-vllm-calibration/today"), "--name", "cpu-epyc-2c",
                         "--model", "workloads/models/tiny-llama.yaml", "--yaml", str(tmp_path / "p.yaml")])
    words = line.split()
    assert words[1:5] == ["calibration/microbench/cpu_profile.py", "measure", "--out",
                          "validation/cpu-vllm-calibration/today"], line
    assert str(ROOT) not in line
    assert words[-1] == str(tmp_path / "p.yaml")  # outside the checkout: as it ran
