"""Per-instance HBM budget: weights per GPU and the KV pool left for the cache.

SGLang reserves ``mem_fraction_static`` x HBM for weights + KV pool; the rest holds
activations and CUDA graphs. KV per GPU per token depends on how attention is sharded:
MLA latents are replicated on every attention-TP rank, GQA heads are split (see
``ModelSpec.kv_replication``). Under DP attention each DP rank holds its own requests' KV.
"""
from __future__ import annotations

from dataclasses import dataclass

from .hardware import HardwareProfile
from .model import ModelSpec


@dataclass(frozen=True)
class InstanceMemory:
    weights_bytes_per_gpu: float
    available_bytes_per_gpu: float  # mem_fraction_static x HBM
    kv_bytes_per_token_per_gpu: float  # on the GPU that holds the token
    kv_tokens: int  # pool capacity of the whole instance, tokens
    reserve_tokens: int
    gpus: int

    @property
    def weights_gb(self) -> float:
        return self.weights_bytes_per_gpu / 1e9

    @property
    def available_gb(self) -> float:
        return self.available_bytes_per_gpu / 1e9

    @property
    def reserve_gb(self) -> float:
        return self.reserve_tokens * self.kv_bytes_per_token_per_gpu / 1e9

    @property
    def activation_gb(self) -> float:
        return 0.0  # held outside mem_fraction_static

    @property
    def needed_gb(self) -> float:
        return self.weights_gb + self.reserve_gb


def kv_dtype(model: ModelSpec, engine_kv_dtype: str) -> str:
    return model.kv_dtype if engine_kv_dtype == "auto" else engine_kv_dtype


def weights_per_gpu(model: ModelSpec, world: int, attn_tp: int, ep: int, redundant: int = 0) -> float:
    """Bytes of weights on one GPU of an instance of ``world`` GPUs."""
    wb = model.weight_bytes_per_param
    attn = model.num_layers * model.attn_params * wb / attn_tp
    dense = model.n_dense_layers * model.dense_mlp_params * wb / world
    emb = model.embedding_params * 2 / attn_tp
    experts = 0.0
    if model.moe:
        per_layer_expert = model.expert_params * wb
        if ep > 1:
            routed = (model.moe.num_experts + redundant) / ep
        else:
            routed = model.moe.num_experts / world
        shared = model.moe.num_shared_experts / attn_tp
        experts = model.n_moe_layers * (routed + shared) * per_layer_expert
    return attn + dense + emb + experts


def instance_memory(hw: HardwareProfile, model: ModelSpec, group) -> InstanceMemory:
    """Memory budget of one instance of ``group`` (a GroupSpec) on ``hw``."""
    gpn = hw.gpus_per_node
    world = group.world(gpn)
    attn_tp = world // group.dp
    eng = group.engine
    w = weights_per_gpu(model, world, attn_tp, group.ep, eng.ep_num_redundant_experts)
    avail = eng.mem_fraction_static * hw.gpu.hbm_bytes
    per_tok = model.kv_bytes_per_token(kv_dtype(model, eng.kv_cache_dtype)) * model.kv_replication(attn_tp) / attn_tp
    free = max(0.0, avail - w)
    tokens = int(group.dp * free // per_tok)
    if eng.max_total_tokens is not None:
        tokens = min(tokens, eng.max_total_tokens)
    return InstanceMemory(w, avail, per_tok, tokens, eng.min_kv_reserve_tokens, world)
