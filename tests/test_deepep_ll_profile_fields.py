"""A hardware profile's DeepEP low-latency constants (``calibration.deepep_ll_dispatch`` /
``deepep_ll_combine``: ``base_us``, ``pair_us``, ``nvl_gbps``, ``rdma_gbps``, costs/deepep.py)
are checked at load: a negative ``pair_us`` used to be accepted (the kernel then got faster with
every remote pair: DeepSeek-V3 EP16 decode at 8 ms instead of ~45 ms), a text one crashed the
first price with a ValueError traceback."""
from __future__ import annotations

import dataclasses
import math

import pytest

from pdsim.specs.catalog import hardware_keys, load_hardware_ref
from pdsim.specs.errors import SpecError

GOOD = {"base_us": 12.8, "pair_us": 0.062, "nvl_gbps": 266.0, "rdma_gbps": 47.6}


def _overlay(tmp_path, fields: dict) -> str:
    lines = ["base: h100", "calibration:", "  deepep_ll_combine:"]
    lines += [f"    {k}: {v}" for k, v in fields.items()]
    p = tmp_path / "bad.yaml"
    p.write_text("\n".join(lines) + "\n")
    return str(p)


def test_every_bundled_profile_and_a_good_overlay_load(tmp_path):
    for key in hardware_keys():
        for op in ("dispatch", "combine"):
            p = load_hardware_ref(key).calibration.get(f"deepep_ll_{op}")
            assert p is None or (p["pair_us"] >= 0 and math.isfinite(p["rdma_gbps"]))
    p = load_hardware_ref(_overlay(tmp_path, GOOD)).calibration["deepep_ll_combine"]
    assert p["pair_us"] == pytest.approx(0.062)


@pytest.mark.parametrize("key, value, words", [
    ("pair_us", -5, ">= 0"),
    ("pair_us", "abc", "a number"),
    ("base_us", ".nan", "finite"),  # the converter's own check
    ("nvl_gbps", 0, "> 0"),
    ("rdma_gbps", -47.6, "> 0"),
    ("base_us", ".inf", "finite"),
])
def test_bad_deepep_ll_constants_are_refused_naming_the_field(tmp_path, key, value, words):
    path = _overlay(tmp_path, {**GOOD, key: value})
    with pytest.raises(SpecError) as err:
        load_hardware_ref(path)
    msg = str(err.value)
    assert f"calibration.deepep_ll_combine.{key}" in msg and words in msg and "bad.yaml" in msg
    assert "\n" not in msg


def test_a_missing_deepep_ll_constant_is_refused():
    """(An overlay inherits its base's constants, so this builds the profile directly.)"""
    h100 = load_hardware_ref("h100")
    cal = {**h100.calibration, "deepep_ll_combine": {k: v for k, v in GOOD.items() if k != "nvl_gbps"}}
    with pytest.raises(SpecError, match="calibration.deepep_ll_combine.nvl_gbps"):
        dataclasses.replace(h100, calibration=cal)
    no_pair = {k: v for k, v in GOOD.items() if k != "pair_us"}  # optional: no per-pair cost
    assert dataclasses.replace(h100, calibration={**h100.calibration, "deepep_ll_combine": no_pair})
