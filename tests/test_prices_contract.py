"""The step-cost contract of base.py: exact linearity in the attention work (step_coeffs),
breakdown consistent with step_time, defaults of the new keywords reproduce the plain step."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pdsim.costs import build_step_cost
from pdsim.costs.speculative import SpeculativeStepCost, mtp_draft_model
from pdsim.specs import catalog
from pdsim.specs.features import SpeculativeSpec
from pdsim.specs.scenario import EngineSpec, GroupSpec

DSV3 = catalog.load_model_ref("deepseek-v3")
LLAMA = catalog.load_model_ref("llama-3.1-8b")
H800, H20 = catalog.load_hardware_ref("h800"), catalog.load_hardware_ref("h20")
CASES = [
    (H800, DSV3, GroupSpec(nodes=4, dp=32, ep=32, enable_dp_attention=True,
                           engine=EngineSpec(deepep_mode="normal", enable_two_batch_overlap=True)), "prefill"),
    (H800, DSV3, GroupSpec(nodes=9, dp=72, ep=72, enable_dp_attention=True,
                           engine=EngineSpec(ep_num_redundant_experts=32, deepep_mode="low_latency")), "decode"),
    (H20, DSV3, GroupSpec(nodes=1, engine=EngineSpec(enable_two_batch_overlap=True)), "colocated"),
    (H20, LLAMA, GroupSpec(gpus=2), "colocated"),
]


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(["roofline", "calibrated"]), st.sampled_from(range(len(CASES))), st.integers(0, 32768),
       st.integers(0, 4096), st.floats(0, 1e9), st.floats(0, 1e9), st.sampled_from([None, 0.5, 2.0]), st.integers(1, 4))
def test_step_time_is_computed_from_step_coeffs(kind, case, tokens, batch, attn, ctx, skew, q):
    hw, model, g, role = CASES[case]
    c = build_step_cost(kind, hw, model, g, role)
    seqs = 1 if tokens else 0
    rank = None if skew is None else (tokens + batch * q) / g.dp * skew
    c0, ca, cc = c.step_coeffs(tokens, seqs, batch, rank_tokens=rank, decode_tokens_per_seq=q)
    t = c.step_time(tokens, attn, seqs, batch, ctx, rank_tokens=rank, decode_tokens_per_seq=q)
    if c.linear:
        assert t == c0 + ca * attn + cc * ctx  # bit-identical: the world may memoise the triple
    else:  # decode TBO hides communication behind the step's own attention (costs/tbo.py)
        assert t <= (c0 + ca * attn + cc * ctx) * (1 + 1e-12)  # the triple holds the least hiding
    parts = c.breakdown(tokens, attn, seqs, batch, ctx, rank_tokens=rank, decode_tokens_per_seq=q)
    assert abs(sum(parts.values()) - t) <= 1e-9 * max(t, 1e-9)
    assert all(v >= 0 for v in parts.values())


def test_defaults_reproduce_the_plain_step():
    hw, model, g, role = CASES[1]
    c = build_step_cost("calibrated", hw, model, g, role)
    b = 64 * 72
    assert c.step_time(0, 0.0, 0, b, b * 3000.0) == c.step_time(0, 0.0, 0, b, b * 3000.0, rank_tokens=b / 72,
                                                                 decode_tokens_per_seq=1)


def test_speculative_wrapper_keeps_the_contract():
    hw, model, g, role = CASES[1]
    spec = SpeculativeSpec()
    model = model.__class__(**{**model.__dict__, "mtp_layers": 1})
    t = build_step_cost("calibrated", hw, model, g, role)
    d = build_step_cost("calibrated", hw, mtp_draft_model(model, spec), g, role, with_overhead=False)
    s = SpeculativeStepCost(t, d, spec)
    b = 16 * 72
    c0, ca, cc = s.step_coeffs(0, 0, b)
    assert s.step_time(0, 0.0, 0, b, b * 4000.0) == c0 + ca * 0.0 + cc * b * 4000.0
    assert abs(sum(s.breakdown(0, 0.0, 0, b, b * 4000.0).values()) - s.step_time(0, 0.0, 0, b, b * 4000.0)) < 1e-12
