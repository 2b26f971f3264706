"""Prices of the features issue 12 adds for the world to wire: speculative decoding, pipeline
parallelism, weight quantisation, P/D fixed costs."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from pdsim.costs import build_step_cost
from pdsim.costs.pd_overheads import pd_fixed_costs
from pdsim.costs.pipeline import PipelineStepCost, stage_layers, stage_model
from pdsim.costs.speculative import (SpeculativeStepCost, accepted_pmf, mtp_draft_model, sample_accepted,
                                     tokens_per_step)
from pdsim.specs import SpecError, catalog
from pdsim.specs.features import PDOverheadSpec, PipelineSpec, QuantSpec, SpeculativeSpec
from pdsim.specs.hf_config import load_hf_config
from pdsim.specs.scenario import EngineSpec, GroupSpec

DSR1 = dataclasses.replace(catalog.load_model_ref("deepseek-r1"), mtp_layers=1)
LLAMA = catalog.load_model_ref("llama-3.1-8b")
H20, A100, A10 = (catalog.load_hardware_ref(k) for k in ("h20", "a100-80gb", "a10"))


def test_mtp_acceptance_matches_the_measured_accept_lengths():
    """DeepSeek MTP on H20 (LMSYS 2025-09-26): accept length 1.8-1.9 with one step, 2.4-2.7 with
    two, 2.9-3.3 with three."""
    for steps, lo, hi in ((1, 1.8, 1.9), (2, 2.4, 2.7), (3, 2.9, 3.3)):
        spec = SpeculativeSpec(num_steps=steps, num_draft_tokens=steps + 1)
        assert lo <= tokens_per_step(spec) <= hi
        pmf = accepted_pmf(spec.rates)
        assert pmf.sum() == pytest.approx(1.0) and (pmf >= 0).all()
    spec = SpeculativeSpec(num_steps=2, num_draft_tokens=3)
    draws = sample_accepted(spec, np.random.default_rng(0), 200_000)
    assert draws.mean() + 1 == pytest.approx(tokens_per_step(spec), rel=0.01)


def test_speculative_spec_errors_name_the_field():
    with pytest.raises(SpecError, match="num_draft_tokens"):
        SpeculativeSpec(num_steps=2, num_draft_tokens=2)
    with pytest.raises(SpecError, match="accept_rates"):
        SpeculativeSpec(num_steps=5, num_draft_tokens=6)
    with pytest.raises(SpecError, match="mtp_layers"):
        mtp_draft_model(dataclasses.replace(DSR1, mtp_layers=0), SpeculativeSpec())


def _spec_cost(kind="calibrated", batch=8):
    g = GroupSpec(nodes=2, dp=16, ep=16, enable_dp_attention=True,
                  engine=EngineSpec(deepep_mode="low_latency", kv_cache_dtype="fp8"))
    spec = SpeculativeSpec()
    t = build_step_cost(kind, H20, DSR1, g, "decode")
    d = build_step_cost(kind, H20, mtp_draft_model(DSR1, spec), g, "decode", with_overhead=False)
    return t, SpeculativeStepCost(t, d, spec), spec


def test_mtp_pays_at_small_batch_on_h20():
    """Memory-bound small-batch decode verifies 2 tokens per sequence for little more than the
    cost of one: tokens per second per GPU improve with MTP."""
    t, s, spec = _spec_cost()
    b, ctx = 8 * 16, 4864.0
    plain = t.step_time(0, 0, 0, b, b * ctx)
    mtp = s.step_time(0, 0, 0, b, b * ctx)
    assert plain < mtp < 2 * plain
    assert b * tokens_per_step(spec) / mtp > b / plain
    assert s.breakdown(0, 0, 0, b, b * ctx)["draft"] > 0


def test_pipeline_stages_split_layers_and_set_throughput_and_latency():
    m70 = load_hf_config(catalog.models_dir() / "hf" / "llama-3.1-70b" / "config.json")
    assert stage_layers(61, 4) == [16, 15, 15, 15]
    ds = catalog.load_model_ref("deepseek-v3")
    assert stage_model(ds, 4, 0).n_dense_layers == 3 and stage_model(ds, 4, 1).n_dense_layers == 0
    pp = PipelineStepCost("calibrated", A100, m70, GroupSpec(nodes=1), "colocated", PipelineSpec(pp_size=2))
    args = (0, 0.0, 0, 64, 64 * 2000.0)
    stages = pp.stage_times(*args)
    assert pp.step_time(*args) == max(stages)
    assert pp.latency(*args) > sum(stages)
    whole = build_step_cost("calibrated", A100, m70, GroupSpec(nodes=1), "colocated").step_time(*args)
    assert max(stages) < 0.7 * whole  # half the layers per stage
    with pytest.raises(SpecError, match="pp_size"):
        PipelineStepCost("calibrated", A100, LLAMA, GroupSpec(gpus=1), "colocated", PipelineSpec(pp_size=64))


def test_w4a16_is_faster_when_memory_bound_and_slower_when_compute_bound():
    """AWQ 4-bit weights: ~4x fewer weight bytes at small batch (Marlin-style W4A16), the
    dequantisation overhead at large batch."""
    awq = catalog.load_model_ref("llama-3.1-8b-awq")
    assert awq.weight_bytes_per_param == pytest.approx(0.5 + 2.5 / 128)
    g = GroupSpec(gpus=1)
    f16 = build_step_cost("calibrated", A10, LLAMA, g, "decode")
    w4 = build_step_cost("calibrated", A10, awq, g, "decode")
    small16, small4 = f16.breakdown(0, 0, 0, 1, 1000.0), w4.breakdown(0, 0, 0, 1, 1000.0)
    assert small4["mlp"] < 0.35 * small16["mlp"]
    big16, big4 = f16.breakdown(8192, 8192 * 4096.0, 2, 0, 0), w4.breakdown(8192, 8192 * 4096.0, 2, 0, 0)
    assert big4["mlp"] > big16["mlp"]
    assert QuantSpec("w8a8_int8", 8).gemm_dtype == "int8" and A100.gpu.peak_flops("int8") == 624e12
    with pytest.raises(SpecError, match="bits"):
        QuantSpec("awq", 8)


def test_pd_fixed_costs():
    c = pd_fixed_costs()
    first = pd_fixed_costs(first_contact=True)
    assert c.ingress_s == c.egress_s == pytest.approx(1e-3)
    assert first.bootstrap_s - c.bootstrap_s == pytest.approx(50e-3)
    assert pd_fixed_costs(PDOverheadSpec(router_ms=0.2)).ingress_s == pytest.approx(0.2e-3)
    with pytest.raises(SpecError, match="router_ms"):
        PDOverheadSpec(router_ms=-1)
