"""Kernel-level compute forms shared by the step models and the calibration fits (seconds).

Every form is a roofline with fitted fractions: compute at ``eff`` of the GPU's dense peak,
memory at ``hbm_eff`` of its HBM bandwidth, the slower one bounding the kernel, plus a fixed
kernel latency. The functions take floats or numpy arrays (plain arithmetic, so the fits can
evaluate whole tables at once); the step models in roofline.py inline the same arithmetic with
coefficients precomputed per instance (tests check the two agree).

GEMM, M rows (tokens), FLOPs F = 2 M N K, bytes B (weights + activations):
    t = lat + max(F (M + m_half) / (M peak eff), B / (hbm hbm_eff))
  eff (M) = eff x M / (M + m_half) is the tensor-core utilisation of a GEMM with M rows
  (small M leaves tiles idle). Fitted to calibration/data/gemm.csv per dtype (bf16, fp8
  per-tensor, fp8_block = DeepGEMM block-scaled).

MoE layer (grouped GEMM over one GPU's experts, SwiGLU: 3 matrices of hidden x inter):
    F = 6 hidden inter x assignments,  B = touched experts x 3 hidden inter x weight bytes
    M = assignments per touched expert,  t = GEMM form with the MoE constants.
  Fitted to calibration/data/moe.csv (SGLang fused-MoE Triton kernel).

Attention, prefill (causal): F = pair_flops x token pairs, t = lat + F / (peak_bf16 eff).
  GQA pair FLOPs: 4 heads head_dim (QK^T and PV); MLA prefill as MHA: 2 heads (nope + rope + v).
  Fitted to attention.csv (FA3).
Attention, decode: every context token's KV is read once per step:
    t = lat + max(KV bytes / (hbm hbm_eff), F / (peak_bf16 eff))
  MLA decode runs weight-absorbed (MQA over the 576-wide latent): pair FLOPs
  2 heads (2 kv_lora + rope). Fitted to the decode rows of attention.csv (GQA) and mla.csv (MLA).
"""
from __future__ import annotations

import numpy as np


def gemm_s(m, flops, nbytes, peak: float, hbm: float, eff: float, m_half: float, hbm_eff: float, lat_s: float):
    """Seconds of a GEMM with ``m`` rows, ``flops`` FLOPs and ``nbytes`` bytes moved."""
    m = np.maximum(m, 1e-9)
    return lat_s + np.maximum(flops * (m + m_half) / (m * peak * eff), nbytes / (hbm * hbm_eff))


def moe_balanced(tokens, top_k: int, experts: int, ep: int = 1, tp: int = 1):
    """(assignments on one GPU, experts it touches, in units of whole experts' weights) when
    ``tokens`` route evenly over all experts (the balanced case the MoE tables measure); EP
    splits the experts, TP slices every expert (a GPU holds 1/tp of each)."""
    assign = tokens * top_k / ep
    touched = np.minimum(tokens * top_k, experts) / ep / tp
    return assign, touched


def moe_s(assign, touched, hidden: int, inter: int, wbytes: float, peak: float, hbm: float,
          eff: float, m_half: float, hbm_eff: float, lat_s: float, tp=1):
    """Seconds of one GPU's grouped expert GEMMs (up+gate and down, SwiGLU)."""
    """``touched`` counts whole experts' weights (a TP slice of 1/tp counts 1/tp); ``m``, the
    GEMM rows per expert, is ``assign / experts``: tokens per touched expert."""
    flops = 6.0 * hidden * inter * assign / tp
    nbytes = touched * 3.0 * hidden * inter * wbytes
    m = assign / np.maximum(touched * tp, 1e-9)
    return gemm_s(m, flops, nbytes, peak, hbm, eff, m_half, hbm_eff, lat_s)


def gqa_pair_flops(heads: int, head_dim: int):
    return 4.0 * heads * head_dim


def mla_pair_flops(heads: int, kv_lora: int, rope: int):
    """Weight-absorbed MLA: scores over kv_lora + rope, values over kv_lora, per head."""
    return 2.0 * heads * (2 * kv_lora + rope)


def prefill_attention_s(pairs, pair_flops, peak: float, eff: float, lat_s: float):
    return lat_s + pairs * pair_flops / (peak * eff)


def decode_attention_s(kv_bytes, flops, peak: float, hbm: float, eff: float, hbm_eff: float, lat_s: float):
    return lat_s + np.maximum(kv_bytes / (hbm * hbm_eff), flops / (peak * eff))
