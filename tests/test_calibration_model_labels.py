"""A profile's calibration model says what kind it is (``label``: borrowed / measured, else derived
or fitted from its other keys) and how uncertain (``rel_uncertainty``); ``pdsim calibrate report``
and ``pdsim sensitivity`` read both. A mistyped label or a non-numeric uncertainty is refused
when the profile loads, naming the field, not listed under another kind without a word or
stopped inside the sensitivity study."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pdsim.cli import main
from pdsim.specs.errors import SpecError
from pdsim.specs.hardware import load_hardware

ROOT = Path(__file__).resolve().parents[1]


def _profile(tmp_path, **mooncake) -> Path:
    d = yaml.safe_load((ROOT / "hardware_profiles" / "h20.yaml").read_text())
    d["calibration"]["mooncake"].update(mooncake)
    p = tmp_path / "h20-edited.yaml"
    p.write_text(yaml.safe_dump(d, sort_keys=False))
    return p


@pytest.mark.parametrize("mooncake, field, expected", [
    ({"label": "mesured"}, "calibration.mooncake.label", "borrowed, measured"),
    ({"rel_uncertainty": "high"}, "calibration.mooncake.rel_uncertainty", "a number >= 0"),
    ({"rel_uncertainty": -0.2}, "calibration.mooncake.rel_uncertainty", "a number >= 0"),
])
def test_a_bad_label_or_uncertainty_is_refused_naming_the_field(tmp_path, mooncake, field, expected):
    path = _profile(tmp_path, **mooncake)
    with pytest.raises(SpecError) as err:
        load_hardware(path)
    assert field in str(err.value) and expected in str(err.value) and str(path) in str(err.value)


def test_sensitivity_says_which_field_of_which_file(tmp_path, capsys):
    path = _profile(tmp_path, rel_uncertainty="high")
    assert main(["sensitivity", "llama8b-a800-colocated", "--set", f"hardware={path}",
                 "--only", "calibration.mooncake"]) != 0
    err = capsys.readouterr().err
    assert "calibration.mooncake.rel_uncertainty" in err and "internal failure" not in err, err

