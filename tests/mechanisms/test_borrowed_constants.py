"""Transfer constants copied from another GPU's fit say so (issue 23, item 1, last bullet; item 7,
labels): a profile's ``calibration.mooncake`` is fitted only where calibration/data holds that
system's own Mooncake transfers (H800: Mooncake docs' vLLM 1P1D table and SGLang PR #7236 /
Mooncake PR #499; H20-3e: Mooncake docs' SGLang 1P1D table); every other profile borrows the
setup and the fraction of line rate of the measured system with the closest NIC bandwidth per
GPU (the rule, pdsim/calibrate/fit.py ``_fill_comm``), labelled ``borrowed`` with its donor and
at least the derived uncertainty (25%). An A10 with 25 Gb/s per GPU is not priced with H800's
numbers as if they were its own.
"""
from __future__ import annotations

import pytest

from pdsim.calibrate import data
from pdsim.calibrate.fit import DERIVED_MIN_UNCERTAINTY
from pdsim.specs.catalog import hardware_keys, load_hardware_ref

OWN = set(data.load("mooncake_transfer").query("use")["hardware"])


def test_only_systems_with_their_own_transfers_have_a_fitted_mooncake_model():
    assert OWN == {"h800", "h20-3e"}
    seen = 0
    for key in hardware_keys():
        p = load_hardware_ref(key).calibration.get("mooncake")
        if p is None:
            continue
        seen += 1
        if key in OWN:
            assert "label" not in p and "derived_from" not in p, key
            assert p["rel_uncertainty"] >= max(p["fit_mape"], p["heldout_mape"])  # at least its own source's error
            continue
        assert p["label"] == "borrowed", key
        donor = p["derived_from"].split("borrowed from ", 1)[1].split(",", 1)[0]
        assert donor in OWN, (key, donor)
        assert "closest NIC bandwidth per GPU" in p["derived_from"]
        assert p["rel_uncertainty"] >= DERIVED_MIN_UNCERTAINTY
        assert p["setup_ms"] == load_hardware_ref(donor).calibration["mooncake"]["setup_ms"]  # copied, and said so
    assert seen >= 8


def test_the_donor_is_the_closest_nic_share_not_the_first_fit():
    """A10 (one 25 Gb/s NIC per GPU in its profile) borrows from the measured system whose NIC
    share is closest, and the ratio is printed with it."""
    a10 = load_hardware_ref("a10")
    p = a10.calibration["mooncake"]
    donor = p["derived_from"].split("borrowed from ", 1)[1].split(",", 1)[0]
    others = OWN - {donor}
    mine, theirs = a10.nic_bytes_per_gpu, load_hardware_ref(donor).nic_bytes_per_gpu
    for o in others:
        other = load_hardware_ref(o).nic_bytes_per_gpu
        assert abs(theirs / mine - 1) <= abs(other / mine - 1) or theirs <= other
    assert f"x{mine / theirs:.2f}" in p["derived_from"]


def test_a_constant_is_measured_only_on_the_gpu_it_was_measured_on():
    """Item 7, labels: DeepEP's docs measured the NVLink fraction (~160 of 200 GB/s per direction)
    on H800, so every other GPU's is derived from it, and a GPU without NVLink keeps the prior on
    its PCIe peers (an assumption); a factor of 1.0 over a PCIe figure that is already achievable
    is no measurement either."""
    for key in hardware_keys():
        hw = load_hardware_ref(key)
        nvlink = hw.constant_kind("efficiency.nvlink")
        if nvlink == "unused":
            continue
        assert (nvlink == "measured") == (key == "h800"), (key, nvlink)
        if hw.gpu.nvlink_gbps == 0:
            assert nvlink == "assumed", key
        assert hw.constant_kind("efficiency.pcie") != "measured", key


def test_deepeps_sm_share_is_its_24_sms_over_each_gpus_own():
    """DeepEP's normal kernels hold an absolute number of SMs (24 in its README's benchmarks;
    SGLang gives DeepGEMM the rest, ``deep_gemm_num_sms = total - DeepEPConfig.num_sms``): on an
    H20's 78 SMs that is 24/78 of the compute, not the H100's 24/132. DeepEP's README benchmarked
    them on H800: a share carried from there is no measurement of another GPU, not even of the
    132-SM H100 / H200 (the rule of test_a_constant_is_measured_only_on_the_gpu_it_was_measured_on)."""
    for key in hardware_keys():
        hw = load_hardware_ref(key)
        kind = hw.constant_kind("efficiency.deepep_normal_sm_share")
        if kind == "unused":
            continue
        # (the 132-SM Hoppers carry 24/132 rounded to 0.18)
        assert hw.efficiency.deepep_normal_sm_share == pytest.approx(24 / hw.gpu.sms, rel=0.015), key
        assert kind == ("measured" if key == "h800" else "derived"), (key, kind)
