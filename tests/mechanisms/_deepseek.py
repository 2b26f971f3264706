"""Shared shapes of the phenomenon tests: DeepSeek-V3/R1 groups as the public deployments ran them."""
from __future__ import annotations

import dataclasses

from pdsim.costs.registry import build_step_cost
from pdsim.costs.speculative import SpeculativeStepCost, mtp_draft_model, tokens_per_step
from pdsim.specs.catalog import load_hardware_ref, load_model_ref
from pdsim.specs.features import ExpertLoadSpec, SpeculativeSpec
from pdsim.specs.scenario import EngineSpec, GroupSpec

H100, H800, H20 = (load_hardware_ref(k) for k in ("h100", "h800", "h20"))
DSV3, DSR1 = load_model_ref("deepseek-v3"), load_model_ref("deepseek-r1")


def ep_group(nodes: int, decode: bool, tbo: bool = False, redundant: int = 32, **engine) -> GroupSpec:
    """LMSYS's large-scale EP layout: attention DP = EP = every GPU, DeepEP low-latency in decode,
    normal in prefill."""
    eng = EngineSpec(enable_two_batch_overlap=tbo, ep_num_redundant_experts=redundant,
                     deepep_mode="low_latency" if decode else "normal", cuda_graph_max_bs=256 if decode else 0, **engine)
    w = nodes * 8
    return GroupSpec(nodes=nodes, dp=w, ep=w, enable_dp_attention=True, engine=eng)


_COSTS: dict[str, object] = {}


def cost(kind: str, hw, model, group, role: str, **features):
    """build_step_cost, built once per distinct argument set (the tests price many shapes)."""
    key = repr((kind, hw.name, hw.efficiency, model.name, model.num_layers, group, role, sorted(features.items())))
    if key not in _COSTS:
        _COSTS[key] = build_step_cost(kind, hw, model, group, role, **features)
    return _COSTS[key]


def decode_s(hw, model, group, per_gpu: int, context: float, kind: str = "calibrated", load=None) -> float:
    c = cost(kind, hw, model, group, "decode", expert_load=load)
    b = per_gpu * group.dp
    return c.step_time(0, 0.0, 0, b, b * context)


def prefill_s(hw, model, group, per_gpu: int, prompt: int, kind: str = "calibrated", load=None) -> float:
    """One prefill step of ``per_gpu`` tokens on every DP rank, whole prompts of ``prompt`` tokens."""
    c = cost(kind, hw, model, group, "prefill", expert_load=load)
    t = per_gpu * group.dp
    seqs = t / prompt
    return c.step_time(t, seqs * prompt * prompt / 2.0, round(seqs), 0, 0.0)


def mtp_tok_s_per_gpu(batch: int, steps: int, kind: str = "calibrated") -> float:
    """Ant Group's H20 decode (attention DP16 + EP16, FP8 MLA, DeepGEMM swapAB, EPLB) with MTP of
    ``steps`` draft steps, chain drafts: output tokens per second per GPU at ``batch`` per GPU,
    4096-token prompts half-way through 1536 outputs."""
    g = GroupSpec(nodes=2, dp=16, ep=16, enable_dp_attention=True,
                  engine=EngineSpec(deepep_mode="low_latency", kv_cache_dtype="fp8", moe_runner="deepgemm_swapab",
                                    cuda_graph_max_bs=64))
    spec = SpeculativeSpec(num_steps=steps, num_draft_tokens=steps + 1)
    model = dataclasses.replace(DSR1, mtp_layers=max(DSR1.mtp_layers, 1))
    load = ExpertLoadSpec(eplb=True)
    target = build_step_cost(kind, H20, model, g, "decode", expert_load=load)
    draft = build_step_cost(kind, H20, mtp_draft_model(model, spec), g, "decode", with_overhead=False, expert_load=load)
    cost = SpeculativeStepCost(target, draft, spec)
    b = batch * g.dp
    return batch * tokens_per_step(spec) / cost.step_time(0, 0.0, 0, b, b * (4096 + 768.0))
