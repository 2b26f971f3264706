"""The small kernels between the GEMMs and attention: normalisation, residual adds, activation,
FP8 activation quantisation, RoPE and KV-cache writes, MoE gating and the expert permutation.

Each is memory-bound: it reads and writes activations once, at HBM bandwidth, and costs at
least one kernel's fixed latency however few tokens it touches. Per layer and per GPU:

    t = kernels x latency + bytes per token x tokens / (HBM hbm_eff)
                           + bytes per routed assignment x assignments / (HBM hbm_eff)

Tally per token of one DeepSeek-style layer (BF16 activations, 2 bytes; hidden-size passes
counted as reads + writes):
- attention side (``ATTN_KERNELS`` = 5: input RMSNorm, FP8 quantisation of its output, RoPE +
  KV-cache write, quantisation of the attention output, residual add): 6.5 hidden passes (norm
  read + write 2, quantisation read 1 + FP8 write 0.5, residual read 2 + write 1) and 1.5 passes
  over the attention output (heads x v_head_dim, this GPU's heads);
- MLP side (``MLP_KERNELS`` = 5: post-attention RMSNorm, quantisation, gate + top-k, SwiGLU
  activation with its FP8 quantisation, residual add): 6.5 hidden passes, plus per routed
  assignment (and per token for shared experts / a dense MLP) the intermediate: SwiGLU reads
  gate and up (2 x inter), writes inter, quantisation reads it and writes half: 4.5 x inter
  passes; expert parallelism adds the permutation into the grouped-GEMM layout and back (2
  hidden passes per assignment).

These counts are an assumption (a reading of SGLang's DeepSeek layer, not a measurement; the
profile's ``elementwise`` uncertainty is perturbed by ``pdsim sensitivity``). They matter
where activations are large (prefill: ~0.55 MB per token per DeepSeek layer, ~13% of an H100
prefill layer) and, through their latencies, where batches are small (decode, and twice under
two-batch overlap: each micro-batch launches every kernel).

**An unfused layer** (``engine.elementwise: unfused``): the decoder layer as a model's PyTorch code
writes it, module by module, each operator its own kernel and its own pass over HBM
(transformers' ``modeling_llama.py`` / ``modeling_qwen2.py`` in eager mode, which its continuous
batching runs). Bytes per element, BF16 activations (2 B) with the norm computed in FP32 (4 B):

- ``LlamaRMSNorm.forward``: ``to(float32)`` 2 + 4, ``pow(2)`` 4 + 4, ``mean(-1)`` 4, ``x * rsqrt``
  4 + 4, ``to(bfloat16)`` 4 + 2, ``weight * x`` 2 + 2: ``UNFUSED_NORM_BYTES`` = 36 per hidden
  element (a fused RMSNorm: 2 + 2), twice a layer;
- ``apply_rotary_pos_emb`` on q and k: ``q * cos`` 2 + 2, ``rotate_half`` (``-x2`` over half the
  elements 1 + 1, ``cat`` 2 + 2), ``* sin`` 2 + 2, the sum 4 + 2: ``UNFUSED_ROPE_BYTES`` = 20 per
  element of q and of k (fused engines rotate inside the KV-write or attention kernel);
- the attention output's ``transpose(1, 2).contiguous()`` before o_proj: 2 + 2 per q element;
- each residual add (``residual + hidden_states``): 4 + 2 per hidden element, twice a layer;
- ``LlamaMLP``: ``act_fn(gate)`` 2 + 2 and ``* up`` 4 + 2: ``UNFUSED_SWIGLU_BYTES`` = 10 per
  intermediate element (a fused SwiGLU: 4 + 2).

Each operator is a kernel with its fixed latency: the norm 8 (the six passes, the epsilon add and
the rsqrt over one value a row), rotary 5 for q and 5 for k, the copy and the residual add on the
attention side (``UNFUSED_ATTN_KERNELS`` = 20), the norm, SiLU, the product and the residual add on
the MLP side (``UNFUSED_MLP_KERNELS`` = 11), against 5 and 5 fused.

Llama-3.1-8B: 606 KB a token a layer, against 248 KB by the fused tally above. The kernels' count
(``engine.eager_kernels_per_layer``, counted by a profile) prices their launches (costs/host.py);
this prices their traffic, which matters where tokens are many (prefill chunks) and the GPU,
not the host, sets the step.
"""
from __future__ import annotations

ATTN_KERNELS = 5
MLP_KERNELS = 5
HIDDEN_PASSES_ATTN = 6.5
HIDDEN_PASSES_MLP = 6.5
HEAD_PASSES = 1.5
INTER_PASSES = 4.5
PERMUTE_PASSES = 2.0
ACT_BYTES = 2.0
UNFUSED_NORM_BYTES = 36.0
UNFUSED_ROPE_BYTES = 20.0
UNFUSED_OUT_COPY_BYTES = 4.0
UNFUSED_RESIDUAL_BYTES = 6.0
UNFUSED_SWIGLU_BYTES = 10.0
UNFUSED_ATTN_KERNELS = 20
UNFUSED_MLP_KERNELS = 11


def attn_side_bytes(hidden: int, heads_v_per_gpu: float) -> float:
    """Bytes per token of the attention side's small kernels on one GPU."""
    return ACT_BYTES * (HIDDEN_PASSES_ATTN * hidden + HEAD_PASSES * heads_v_per_gpu)


def mlp_side_bytes(hidden: int, inter_per_token: float) -> float:
    """Bytes per token of the MLP side's small kernels (``inter_per_token``: intermediate width
    of the MLP computed for every token on this GPU: a dense MLP's, or the shared experts')."""
    return ACT_BYTES * (HIDDEN_PASSES_MLP * hidden + INTER_PASSES * inter_per_token)


def assignment_bytes(hidden: int, expert_inter: int, expert_parallel: bool) -> float:
    """Bytes per routed (token, expert) assignment on the GPU that computes it."""
    return ACT_BYTES * (INTER_PASSES * expert_inter + (PERMUTE_PASSES * hidden if expert_parallel else 0.0))


def unfused_attn_side_bytes(hidden: int, q_width: float, kv_width: float) -> float:
    """Bytes per token of an unfused layer's attention side on one GPU (module doc): the input
    RMSNorm, rotary on q (``q_width`` = its heads x head_dim) and k (``kv_width``), the output's
    copy to contiguous, the residual add."""
    return (UNFUSED_NORM_BYTES * hidden + UNFUSED_ROPE_BYTES * (q_width + kv_width)
            + UNFUSED_OUT_COPY_BYTES * q_width + UNFUSED_RESIDUAL_BYTES * hidden)


def unfused_mlp_side_bytes(hidden: int, inter_per_token: float) -> float:
    """Bytes per token of an unfused layer's MLP side (module doc): the post-attention RMSNorm,
    SiLU and the gate product apart, the residual add."""
    return (UNFUSED_NORM_BYTES + UNFUSED_RESIDUAL_BYTES) * hidden + UNFUSED_SWIGLU_BYTES * inter_per_token
