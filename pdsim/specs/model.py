"""Model architecture specs with derived parameter counts, FLOPs and KV bytes.

Counts are parameters (not bytes); ``*_bytes`` use the spec's weight dtype. FLOPs count a
multiply-add as 2 FLOPs. KV bytes are per token across all layers.
"""
from __future__ import annotations

import dataclasses

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ._convert import check, load_spec
from .features import QuantSpec

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
Dtype = Literal["bf16", "fp16", "fp8", "fp32"]


@dataclass(frozen=True)
class MLASpec:
    """Multi-head latent attention (DeepSeek-V2/V3): KV cached as a compressed latent."""

    q_lora_rank: int
    kv_lora_rank: int
    qk_rope_dim: int
    qk_nope_dim: int
    v_head_dim: int


@dataclass(frozen=True)
class MoESpec:
    num_experts: int  # routed experts
    top_k: int
    expert_ffn: int  # intermediate size of one expert
    num_shared_experts: int = 0

    def __post_init__(self) -> None:
        check(1 <= self.top_k <= self.num_experts, f"must be in 1..num_experts ({self.num_experts})", "top_k")


@dataclass(frozen=True)
class ModelSpec:
    name: str
    num_layers: int
    hidden: int
    vocab: int
    num_heads: int
    head_dim: int
    attention: Literal["mha", "gqa", "mla"]
    num_kv_heads: int = 0  # GQA/MHA; 0 for MLA
    ffn: int = 0  # dense MLP intermediate size
    num_dense_layers: int | None = None  # first k layers dense; None = all dense unless moe
    mla: MLASpec | None = None
    moe: MoESpec | None = None
    weight_dtype: Dtype = "bf16"
    kv_dtype: Dtype = "bf16"
    gated_mlp: bool = True  # SwiGLU: 3 matrices; GPT-2 style MLP: 2
    tied_embeddings: bool = False
    max_context: int = 131072
    quant: QuantSpec | None = None  # weight quantisation (None: weight_dtype as stored)
    mtp_layers: int = 0  # multi-token-prediction layers shipped with the model (DeepSeek-V3: 1)
    source: str = ""

    def __post_init__(self) -> None:
        for f in ("num_layers", "hidden", "vocab", "num_heads", "head_dim"):
            check(getattr(self, f) >= 1, "must be >= 1", f)
        if self.attention == "mla":
            check(self.mla is not None, "attention: mla needs an mla: block", "mla")
        else:
            check(self.num_kv_heads >= 1, "GQA/MHA needs num_kv_heads >= 1", "num_kv_heads")
            check(self.num_heads % self.num_kv_heads == 0, "must divide num_heads", "num_kv_heads")
        if self.moe is None:
            check(self.ffn > 0, "a dense model needs ffn > 0", "ffn")
        check(self.mtp_layers >= 0, "must be >= 0", "mtp_layers")
        if self.quant is not None and self.quant.method in ("fp8", "fp8_block", "w8a8_fp8", "w8a8_int8"):
            check(self.weight_dtype == "fp8" or self.quant.method == "w8a8_int8",
                  f"{self.quant.method} weights need weight_dtype: fp8", "weight_dtype")
        if self.num_dense_layers is not None:
            check(0 <= self.num_dense_layers <= self.num_layers, "must be in 0..num_layers", "num_dense_layers")
            if self.num_dense_layers > 0:
                check(self.ffn > 0, "dense layers need ffn > 0", "ffn")

    # ---- layer counts -------------------------------------------------------------------
    @property
    def n_dense_layers(self) -> int:
        if self.moe is None:
            return self.num_layers
        return self.num_dense_layers or 0

    @property
    def n_moe_layers(self) -> int:
        return self.num_layers - self.n_dense_layers

    # ---- parameters per layer (counts) ----------------------------------------------------
    @property
    def attn_params(self) -> int:
        """Projection weights of one attention layer."""
        h, H = self.hidden, self.num_heads
        if self.attention == "mla":
            m = self.mla
            qk = m.qk_nope_dim + m.qk_rope_dim
            q = h * m.q_lora_rank + m.q_lora_rank * H * qk if m.q_lora_rank else h * H * qk
            kv = h * (m.kv_lora_rank + m.qk_rope_dim) + m.kv_lora_rank * H * (m.qk_nope_dim + m.v_head_dim)
            o = H * m.v_head_dim * h
            return q + kv + o
        d = self.head_dim
        return h * H * d + 2 * h * self.num_kv_heads * d + H * d * h

    def _mlp_params(self, inter: int) -> int:
        return (3 if self.gated_mlp else 2) * self.hidden * inter

    @property
    def dense_mlp_params(self) -> int:
        return self._mlp_params(self.ffn) if self.ffn else 0

    @property
    def expert_params(self) -> int:
        """One routed (or shared) expert."""
        return self._mlp_params(self.moe.expert_ffn) if self.moe else 0

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2)

    @property
    def total_params(self) -> int:
        n = self.num_layers * self.attn_params + self.n_dense_layers * self.dense_mlp_params
        if self.moe:
            n += self.n_moe_layers * (self.moe.num_experts + self.moe.num_shared_experts) * self.expert_params
        return n + self.embedding_params

    @property
    def active_params(self) -> int:
        """Parameters touched per token (routed top-k + shared experts + everything dense)."""
        n = self.num_layers * self.attn_params + self.n_dense_layers * self.dense_mlp_params
        if self.moe:
            n += self.n_moe_layers * (self.moe.top_k + self.moe.num_shared_experts) * self.expert_params
        return n + self.embedding_params

    # ---- bytes and FLOPs ------------------------------------------------------------------
    @property
    def weight_bytes_per_param(self) -> float:
        """Stored bytes per GEMM weight (quantisation scales included)."""
        if self.quant is not None and self.quant.method != "none":
            return self.quant.bytes_per_param
        return DTYPE_BYTES[self.weight_dtype]

    @property
    def quant_method(self) -> str:
        """The quantisation the GEMM kernels see: the quant block's, else ``fp8_block`` for FP8
        checkpoints (DeepSeek's block-scaled FP8, DeepGEMM) and ``none`` otherwise."""
        if self.quant is not None:
            return self.quant.method
        return "fp8_block" if self.weight_dtype == "fp8" else "none"

    @property
    def gemm_dtype(self) -> str:
        """Tensor-core input dtype of the weight GEMMs: 'bf16', 'fp8' or 'int8'."""
        if self.quant is not None:
            return self.quant.gemm_dtype
        return "fp8" if self.weight_dtype == "fp8" else "bf16"

    @property
    def weight_bytes(self) -> float:
        """All weights, bytes (embeddings kept in BF16 even for FP8 checkpoints)."""
        emb = self.embedding_params * 2
        return (self.total_params - self.embedding_params) * self.weight_bytes_per_param + emb

    @property
    def gemm_flops_per_token(self) -> float:
        """Weight-GEMM FLOPs per token (2 x active non-embedding params + LM head), no attention."""
        return 2.0 * (self.active_params - self.embedding_params + self.vocab * self.hidden)

    @property
    def attn_flops_per_token_pair(self) -> float:
        """Attention score+value FLOPs for one (query token, context token) pair, all layers.

        GQA/MHA: QK^T and PV, 2 x 2 x heads x head_dim. MLA (prefill, non-absorbed form):
        heads x (qk_nope + qk_rope) for QK and heads x v_head_dim for PV, 2 FLOPs each.
        """
        if self.attention == "mla":
            m = self.mla
            per_layer = 2 * self.num_heads * (m.qk_nope_dim + m.qk_rope_dim + m.v_head_dim)
        else:
            per_layer = 4 * self.num_heads * self.head_dim
        return float(per_layer * self.num_layers)

    @property
    def attn_flops_per_token_pair_decode(self) -> float:
        """Decode attention FLOPs per (query, context) pair. MLA decode runs weight-absorbed over
        the latent: heads x (kv_lora + rope) for scores plus heads x kv_lora for values."""
        if self.attention == "mla":
            m = self.mla
            per_layer = 2 * self.num_heads * (2 * m.kv_lora_rank + m.qk_rope_dim)
            return float(per_layer * self.num_layers)
        return self.attn_flops_per_token_pair

    def kv_bytes_per_token(self, dtype: str | None = None) -> int:
        """KV-cache bytes per token over all layers (one copy, no TP replication)."""
        b = DTYPE_BYTES[dtype or self.kv_dtype]
        if self.attention == "mla":
            return (self.mla.kv_lora_rank + self.mla.qk_rope_dim) * self.num_layers * b
        return 2 * self.num_kv_heads * self.head_dim * self.num_layers * b

    def kv_replication(self, attn_tp: int) -> int:
        """Copies of each token's KV across ``attn_tp`` ranks: MLA latents are replicated on
        every TP rank; GQA heads are sharded until TP exceeds the KV-head count, then repeated."""
        if self.attention == "mla":
            return attn_tp
        return max(1, attn_tp // self.num_kv_heads)


def stage_layers(num_layers: int, pp: int) -> list[int]:
    """Layers per stage: the first ``num_layers % pp`` stages take one extra."""
    base, extra = divmod(num_layers, pp)
    return [base + (1 if i < extra else 0) for i in range(pp)]


def stage_model(model: ModelSpec, pp: int, stage: int) -> ModelSpec:
    """The slice of ``model`` one pipeline stage runs (dense layers first, as in the model)."""
    sizes = stage_layers(model.num_layers, pp)
    first = sum(sizes[:stage])
    n = sizes[stage]
    dense = max(0, min(model.n_dense_layers - first, n))
    return dataclasses.replace(model, name=f"{model.name}-pp{stage}", num_layers=n,
                               num_dense_layers=dense if model.moe else None)
