"""Calibrated cost models: held-out error bounds, physical sanity, fallback, microbench harness."""
from __future__ import annotations

import dataclasses
import importlib.util
import subprocess
import sys
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdsim.calibrate import data
from pdsim.calibrate.fit import fit_all
from pdsim.calibrate.report import comparison
from pdsim.costs import build_step_cost
from pdsim.costs.transfer import flow_cap, transfer_plan
from pdsim.specs import SpecError, catalog
from pdsim.specs.scenario import EngineSpec, GroupSpec, TransferSpec

FITS = fit_all(write=False, quiet=True)


@pytest.mark.parametrize("system, model, bound", [
    ("h100", "deepep_ll_dispatch", 0.10), ("h100", "deepep_ll_combine", 0.10),
    ("h800", "deepep_ll_dispatch", 0.25), ("h800", "deepep_ll_combine", 0.30),
    ("h100", "deepep_normal_dispatch", 0.05), ("h100", "deepep_normal_combine", 0.10),
    ("h800", "mooncake", 0.15), ("h20", "mooncake", 0.10), ("h100", "attention", 0.15), ("h200", "attention", 0.15),
])
def test_held_out_error_within_stated_bound(system, model, bound):
    """Leave-one-out prediction error of each fitted model (the bounds we state in the docs)."""
    assert FITS[system][model]["loo_mape"] <= bound


@pytest.mark.parametrize("system, dtype, bound", [("h100", "bf16", 0.10), ("h100", "fp8", 0.20),
                                                  ("h200", "bf16", 0.10), ("h200", "fp8", 0.20)])
def test_gemm_efficiency_predicts_held_out_shapes(system, dtype, bound):
    """Every third (N, K) shape is held out of the fit and predicted."""
    p = FITS[system][f"gemm_{dtype}"]
    assert p["heldout_mape"] <= bound and 0.3 < p["eff"] <= 1.0


def test_profiles_carry_the_fitted_constants():
    for key in ("h800", "h100", "h20", "h200"):
        cal = catalog.load_hardware_ref(key).calibration
        assert {"deepep_ll_dispatch", "mooncake", "allreduce"} <= set(cal)
    assert "deepep_ll_dispatch" not in catalog.load_hardware_ref("a800").calibration  # no DeepEP on Ampere


def test_report_covers_every_data_file():
    df = comparison()
    assert {"deepep_low_latency", "deepep_normal", "mooncake_transfer", "gemm", "attention"} <= set(df["file"])
    err = df[df["fitted"]].groupby("file")["error"].apply(lambda e: e.abs().mean())
    assert err.drop(["gemm", "attention"]).max() < 0.10 and err[["gemm", "attention"]].max() < 0.20


def test_every_data_row_has_provenance(tmp_path, monkeypatch):
    for name in ("deepep_low_latency", "deepep_normal", "mooncake_transfer", "nccl_allreduce", "gemm", "attention"):
        df = data.load(name)
        assert df[list(data.PROVENANCE)].notna().all().all()
    bad = tmp_path / "data"
    bad.mkdir()
    (bad / "x.csv").write_text("hardware,source,software,date\nh800,,sw,2025\n")
    monkeypatch.setattr(data, "data_dir", lambda: bad)
    with pytest.raises(SpecError, match="line 2: source: every row needs provenance"):
        data.load("x")


DSV3 = catalog.load_model_ref("deepseek-v3")
H800 = catalog.load_hardware_ref("h800")
GROUPS = {
    "prefill": GroupSpec(nodes=4, dp=32, ep=32, enable_dp_attention=True, engine=EngineSpec(deepep_mode="normal")),
    "decode": GroupSpec(nodes=9, dp=72, ep=72, enable_dp_attention=True,
                        engine=EngineSpec(ep_num_redundant_experts=32, deepep_mode="low_latency")),
}


@settings(max_examples=80, deadline=None)
@given(st.sampled_from(["roofline", "calibrated"]), st.sampled_from(["prefill", "decode"]),
       st.integers(0, 200_000), st.integers(0, 20_000), st.integers(1, 100_000), st.floats(1.0, 3.0))
def test_step_time_monotone_in_tokens_and_context(kind, role, tokens, batch, ctx, grow):
    c = build_step_cost(kind, H800, DSV3, GROUPS[role], role)
    if role == "prefill":
        a = c.step_time(tokens, tokens * ctx / 2, 1, 0, 0)
        b = c.step_time(int(tokens * grow), tokens * grow * ctx * grow / 2, 1, 0, 0)
    else:
        a = c.step_time(0, 0, 0, batch, batch * ctx)
        b = c.step_time(0, 0, 0, int(batch * grow), batch * grow * ctx * grow)
    assert b >= a - 1e-12


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["roofline", "calibrated"]), st.integers(1, 20_000), st.integers(1, 16_000))
def test_never_faster_than_the_hardware_roofline(kind, batch, ctx):
    """No step beats peak FLOP/s on its GEMMs nor full HBM bandwidth on its expert weights."""
    g = GROUPS["decode"]
    c = build_step_cost(kind, H800, DSV3, g, "decode")
    t = c.step_time(0, 0, 0, batch, batch * ctx)
    gpus = 72
    flops = batch * DSV3.gemm_flops_per_token / gpus
    assert t >= flops / H800.gpu.peak_flops("fp8")
    experts_per_gpu = (256 + 32) / gpus
    touched = min(experts_per_gpu, experts_per_gpu * batch * 8 / 256)
    weight_read = DSV3.n_moe_layers * touched * DSV3.expert_params / (H800.gpu.hbm_gbps * 1e9)
    assert t >= weight_read * 0.999


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 200_000), st.floats(50, 800), st.floats(1.0, 4.0), st.booleans())
def test_more_nic_bandwidth_never_slows_a_transfer(tokens, gbit, factor, calibrated):
    spec = TransferSpec(backend="mooncake")
    def t(g):
        plan = transfer_plan(DSV3, H800, spec, tokens, 1, 64, calibrated=calibrated)
        return plan.fixed_s + plan.nbytes / flow_cap(H800, plan.senders, 16, g, "mooncake", calibrated)
    assert t(gbit * factor) <= t(gbit) * (1 + 1e-12)


def test_units_of_a_known_transfer():
    """H800 Qwen3-8B 1P1D: 4.5 GB took 31.65 ms; the calibrated plan predicts it within 5%."""
    cal = H800.calibration["mooncake"]
    ms = cal["setup_ms"] + 4.5e9 / (8 * 50e9 * cal["eff"]) * 1e3
    assert abs(ms - 31.65) / 31.65 < 0.05


def test_profile_without_constants_falls_back_with_a_warning():
    bare = dataclasses.replace(H800, calibration={})
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        c = build_step_cost("calibrated", bare, DSV3, GROUPS["decode"], "decode")
    assert c.name == "roofline" and any("falling back to the roofline" in str(x.message) for x in w)
    assert build_step_cost("auto", bare, DSV3, GROUPS["decode"], "decode").name == "roofline"
    assert build_step_cost("auto", H800, DSV3, GROUPS["decode"], "decode").name == "calibrated"


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch not installed (pip install 'pdsim[calibration]')")
@pytest.mark.parametrize("script", ["gemm.py", "attention.py", "moe.py", "forward.py"])
def test_microbench_harness_dry_run(tmp_path, script):
    r = subprocess.run([sys.executable, f"calibration/microbench/{script}", "--dry-run", "--repeat", "2",
                        "--out", str(tmp_path)], capture_output=True, text=True, cwd=catalog.calibration_dir().parent)
    assert r.returncode == 0, r.stderr
    out = next(tmp_path.glob("*.csv")).read_text().splitlines()
    assert len(out) >= 2 and "source" in out[0] and "dry-run" in out[1]
