"""pdsim sensitivity: perturbs each constant with a stated uncertainty, re-simulates, ranks."""
from __future__ import annotations

import dataclasses

from builders import resolve, scenario_dict

from pdsim.calibrate.sensitivity import perturbations, sensitivity, sensitivity_table
from pdsim.cli import main


def _small():
    d = scenario_dict()
    d["workload"]["num_requests"] = 40
    return resolve(d)


def test_perturbations_cover_assumed_and_fitted_constants():
    sc = _small()
    names = {p.constant: p for p in perturbations(sc.hardware)}
    assert "efficiency.step_overhead_us" in names and any(n.startswith("calibration.") for n in names)
    p = names["efficiency.step_overhead_us"]
    u = sc.hardware.uncertainty["efficiency.step_overhead_us"]
    assert p.low.efficiency.step_overhead_us == sc.hardware.efficiency.step_overhead_us * (1 - u)
    assert p.high.efficiency.step_overhead_us == sc.hardware.efficiency.step_overhead_us * (1 + u)
    hbm = names["efficiency.hbm"]
    assert hbm.high.efficiency.hbm <= 1.0  # a fraction of peak never exceeds 1 (said in the note)


def test_sensitivity_ranks_constants_and_skips_unused_ones():
    sc = _small()
    base, rows = sensitivity(sc)
    assert rows and all(rows[i]["max_rel_change"] >= rows[i + 1]["max_rel_change"] for i in range(len(rows) - 1))
    constants = [r["constant"] for r in rows]
    assert not any("deepep" in c for c in constants)  # a dense model never re-runs for DeepEP
    assert "efficiency.step_overhead_us" in constants
    assert "baseline:" in sensitivity_table(base, rows)
    # the perturbed scenario is a dataclasses.replace of the resolved one: the original is untouched
    assert sc.hardware == dataclasses.replace(sc).hardware


def test_cli(tmp_path, capsys):
    import yaml

    p = tmp_path / "s.yaml"
    d = scenario_dict()
    d["workload"]["num_requests"] = 30
    p.write_text(yaml.safe_dump(d))
    out = tmp_path / "s.json"
    assert main(["sensitivity", str(p), "--only", "efficiency.step_overhead_us", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "efficiency.step_overhead_us" in text and out.exists()
