"""Per-instance HBM budget: weights per GPU, runtime buffers, and the KV pool left for the cache.

SGLang reserves ``mem_fraction_static`` x HBM for weights + KV pool; the rest holds activations,
CUDA graphs and communication buffers (DeepEP allocates its buffers after the KV pool, so they
come out of that remainder). When the runtime buffers need more than the remainder, the KV pool
shrinks by the difference (SGLang would otherwise run out of memory capturing its graphs):

    KV pool per GPU = min(mem_fraction_static x HBM, HBM - runtime) - weights

Runtime buffers per GPU (``runtime_bytes``):
- CUDA graphs (decode and colocated roles with ``cuda_graph_max_bs`` > 0): the graph memory pool
  users report, 5 GiB for DeepSeek-class MLA/MoE models (SGLang issue #16143: "DeepSeek uses
  ~6 GB for the first CUDA graph capture" with FA3; LMSYS 2025-05-05 notes CUDA-graph
  duplication of hidden states) and 1.5 GiB for dense models (vLLM 0.9.2 Llama-4: 1.40 GiB,
  SGLang issue #8538); measured by users on one configuration each, so their uncertainty is
  large (``CUDA_GRAPH_REL_UNCERTAINTY``);
- DeepEP low-latency buffers (decode with EP > 1): DeepEP's own layout (csrc/legacy/config.hpp,
  ``LowLatencyLayout``): two send and two receive buffers of experts x max dispatch tokens per
  rank (SGLang default 128) x message bytes (hidden x 2 + 16 B header, or hidden + FP32 scales
  per 128 channels; combine messages hidden x 2 + BF16 min/max per 128 channels);
- DeepEP normal buffers (prefill with EP > 1): NVLink + RDMA buffers from DeepEP's size hints,
  ~1.5 GiB per GPU at hidden 7168 (an estimate, labelled an assumption).

KV per GPU per token depends on how attention is sharded: MLA latents are replicated on every
attention-TP rank, GQA heads are split (``ModelSpec.kv_replication``). Under DP attention each DP
rank holds its own requests' KV, and the dense MLP layers run data-parallel too (SGLang
``--moe-dense-tp-size 1``, its large-EP setup: LMSYS 2025-05-05), so each rank holds them whole
over its attention-TP group.
"""
from __future__ import annotations

from dataclasses import dataclass

from .hardware import GIB, HardwareProfile
from .model import ModelSpec

CUDA_GRAPH_GIB_MOE = 5.0  # SGLang issue #16143 (DeepSeek decode graphs, FA3)
CUDA_GRAPH_GIB_DENSE = 1.5  # vLLM 0.9.2 / SGLang issue #8538 (Llama-4 graphs: 1.40 GiB in vLLM)
CUDA_GRAPH_REL_UNCERTAINTY = 0.6
DEEPEP_NORMAL_GIB = 1.5  # assumption: DeepEP normal-kernel NVL + RDMA size hints at hidden 7168
DEEPEP_LL_MAX_TOKENS = 128  # SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK default


@dataclass(frozen=True)
class InstanceMemory:
    weights_bytes_per_gpu: float
    available_bytes_per_gpu: float  # min(mem_fraction_static x HBM, HBM - runtime)
    kv_bytes_per_token_per_gpu: float  # on the GPU that holds the token
    kv_tokens: int  # pool capacity of the whole instance, tokens
    reserve_tokens: int
    gpus: int
    runtime_bytes_per_gpu: float = 0.0  # CUDA graphs + DeepEP buffers

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
        """Runtime buffers held outside the KV pool (CUDA graphs, DeepEP), GB."""
        return self.runtime_bytes_per_gpu / 1e9

    @property
    def needed_gb(self) -> float:
        return self.weights_gb + self.reserve_gb


def kv_dtype(model: ModelSpec, engine_kv_dtype: str) -> str:
    return model.kv_dtype if engine_kv_dtype == "auto" else engine_kv_dtype


def dense_tp(world: int, dp: int) -> int:
    """TP degree of the dense MLP layers: the attention-TP group (data-parallel dense layers
    under DP attention, SGLang ``--moe-dense-tp-size 1``), the whole world otherwise."""
    return world // dp


def weights_per_gpu(model: ModelSpec, world: int, attn_tp: int, ep: int, redundant: int = 0, draft_layers: int = 0,
                    routed: bool = True) -> float:
    """Bytes of weights on one GPU of an instance of ``world`` GPUs (``draft_layers`` extra
    decoder layers of the model's own MTP module, held like a MoE layer; ``routed`` False: an
    expert-service client, whose routed experts live on the expert servers)."""
    wb = model.weight_bytes_per_param
    layers = model.num_layers + draft_layers
    attn = layers * model.attn_params * wb / attn_tp
    dp = max(1, world // attn_tp)
    dense = model.n_dense_layers * model.dense_mlp_params * wb / dense_tp(world, dp)
    emb = model.embedding_params * 2 / attn_tp
    experts = 0.0
    if model.moe:
        per_layer_expert = model.expert_params * wb
        if not routed:
            share = 0.0
        elif ep > 1:
            share = (model.moe.num_experts + redundant) / ep
        else:
            share = model.moe.num_experts / world
        shared = model.moe.num_shared_experts / attn_tp
        experts = (model.n_moe_layers + draft_layers) * (share + shared) * per_layer_expert
    elif draft_layers:
        dense += draft_layers * model.dense_mlp_params * wb / dense_tp(world, dp)
    return attn + dense + emb + experts


def deepep_low_latency_bytes(hidden: int, experts: int, max_tokens: int = DEEPEP_LL_MAX_TOKENS) -> float:
    """DeepEP low-latency buffer bytes per GPU (csrc/legacy/config.hpp ``LowLatencyLayout``)."""
    scales = hidden // 128
    dispatch_msg = 16 + max(hidden * 2, hidden + scales * 4)
    combine_msg = scales * 4 + hidden * 2
    send = max(max_tokens * dispatch_msg, experts * max_tokens * combine_msg)
    recv = experts * max_tokens * max(dispatch_msg, combine_msg)
    signal = -(-experts * 4 // 128) * 128
    return float(2 * send + 2 * recv + 2 * signal)


def cuda_graph_bytes(model: ModelSpec) -> float:
    big = model.moe is not None or model.attention == "mla"
    return (CUDA_GRAPH_GIB_MOE if big else CUDA_GRAPH_GIB_DENSE) * GIB


def runtime_bytes(model: ModelSpec, group, role: str) -> float:
    """CUDA graph pool + DeepEP buffers per GPU of one instance of ``group`` in ``role``."""
    eng = group.engine
    out = 0.0
    if role != "prefill" and eng.cuda_graph_max_bs > 0:
        out += cuda_graph_bytes(model)
    if model.moe is not None and group.ep > 1:
        low_latency = eng.deepep_mode == "low_latency" or (eng.deepep_mode == "auto" and role != "prefill")
        normal = eng.deepep_mode == "normal" or (eng.deepep_mode == "auto" and role != "decode")
        if low_latency:
            out += deepep_low_latency_bytes(model.hidden, model.moe.num_experts + eng.ep_num_redundant_experts)
        if normal:
            out += DEEPEP_NORMAL_GIB * GIB
    return out


def instance_memory(hw: HardwareProfile, model: ModelSpec, group, role: str = "decode",
                    draft_layers: int = 0) -> InstanceMemory:
    routed = not getattr(group, "expert_service", False)
    """Memory budget of one instance of ``group`` (a GroupSpec) on ``hw`` in ``role``
    ('prefill', 'decode', 'colocated'; the default counts a decode instance's buffers)."""
    gpn = hw.gpus_per_node
    world = group.world(gpn)
    attn_tp = world // group.dp
    eng = group.engine
    w = weights_per_gpu(model, world, attn_tp, group.ep, eng.ep_num_redundant_experts, draft_layers, routed)
    runtime = runtime_bytes(model, group, role)
    avail = min(eng.mem_fraction_static * hw.gpu.hbm_bytes, hw.gpu.hbm_bytes - runtime)
    per_tok = model.kv_bytes_per_token(kv_dtype(model, eng.kv_cache_dtype)) * model.kv_replication(attn_tp) / attn_tp
    free = max(0.0, avail - w)
    tokens = int(group.dp * free // per_tok)
    if eng.max_total_tokens is not None:
        tokens = min(tokens, eng.max_total_tokens)
    return InstanceMemory(w, avail, per_tok, tokens, eng.min_kv_reserve_tokens, world, runtime)


def group_memory(hw: HardwareProfile, model: ModelSpec, group, role: str) -> InstanceMemory:
    """Memory budget of one instance of ``group`` in ``role``: with pipeline parallelism each GPU
    holds one stage's layers (the first, the largest, sets the pool); a decode-capable instance
    running MTP also holds the draft layers."""
    from .model import stage_model

    m = stage_model(model, group.pp, 0) if group.pp > 1 else model
    spec = group.engine.speculative if role != "prefill" else None
    draft = spec.draft_layers if spec is not None and spec.method == "mtp" else 0
    return instance_memory(hw, m, group, role=role, draft_layers=draft)


def expert_server_bytes(model: ModelSpec, servers: int, replicas: int) -> float:
    """Weights on one expert server: its share of every MoE layer's routed experts, replicated."""
    return model.n_moe_layers * model.moe.num_experts * replicas / servers * model.expert_params * model.weight_bytes_per_param
