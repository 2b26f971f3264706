"""Kernel-level compute forms shared by the step models and the calibration fits (seconds).

Every form is a roofline of the GPU it runs on: a compute time (FLOPs at ``eff`` of the GPU's
own dense peak) and a memory time (bytes at ``hbm_eff`` of its own HBM bandwidth), combined
by a soft maximum, plus a fixed kernel latency. Which of the two dominates therefore follows
the kernel's arithmetic intensity relative to *this* GPU's ridge point (peak / bandwidth): the
same GEMM is memory-bound on an H20 (ridge 37 FLOP/B in BF16) long after it turned
compute-bound on an H100 (295). The functions take floats or numpy arrays (plain arithmetic,
so the fits evaluate whole tables at once); the step models in roofline.py use the same
functions through precomputed coefficients (tests check the two agree).

GEMM, M rows (tokens), FLOPs F = 2 M N K, bytes B (weights + activations):
    compute = F x max(M, m_tile) / M / (peak eff)      memory = B / (hbm hbm_eff)
    t = lat + (compute^p + memory^p)^(1/p)             (p = ``sharp``; p -> inf is max())
  ``m_tile`` is the kernel's M granularity: a tile computes m_tile rows whatever M is (Hopper
  WGMMA instructions have M = 64, so a GEMM with 8 tokens costs the tensor-core time of 64;
  PTX ISA, and LMSYS 2025-09-26 on H20). It only matters where padded compute exceeds the
  weight reads, i.e. on GPUs with a low ridge point. ``p`` sets how sharply a kernel turns from
  one bound to the other near the ridge (both limits partly active there).
  Fitted to calibration/data/gemm.csv per GPU and dtype (bf16, fp8 per-tensor, fp8_block =
  DeepGEMM block-scaled).

MoE layer (grouped GEMM over one GPU's experts, SwiGLU: 3 matrices of hidden x inter):
    F = 6 hidden inter x assignments,  B = touched experts x 3 hidden inter x weight bytes
    M = assignments per touched expert, each expert's rows padded to m_tile.
  Fitted to calibration/data/moe.csv (SGLang fused-MoE Triton kernel).

Attention, prefill (causal): t = lat + (pairs + rows x row_pairs) x pair_flops / (peak_bf16 eff).
  GQA pair FLOPs: 4 heads head_dim (QK^T and PV); MLA prefill as MHA: 2 heads (nope + rope + v).
  ``rows`` = query tokens; ``row_pairs`` = key columns of work each query row costs beyond its
  causal pairs, whatever its context: FA3 computes a query tile's diagonal K/V tile whole
  (masked), loads Q, rescales and writes O once per tile, and fills and drains its pipeline per
  tile. Without it one efficiency cannot hold from 1K to 16K prompts: FA3's MHA rows on H100
  (attention.csv, kv_heads = heads) run at 25% of peak at 1K causal and 58% at 16K; with it,
  eff 0.65 and row_pairs ~730 fit all 92 of them to 4% (``mla_prefill``, fit_compute.py).
  Fitted to attention.csv (FA3); ``row_pairs`` 0 where a fit has none (``attention_prefill``).
Attention, decode: every context token's KV is read once per step, FLOPs grow with the query
tokens per sequence (1, or the draft tokens a speculative verify step checks):
    t = lat + max(KV bytes / (hbm hbm_eff), F / (peak eff))
  MLA decode runs weight-absorbed (MQA over the 576-wide latent, FlashMLA): pair FLOPs
  2 heads (2 kv_lora + rope); its constants are FlashMLA's (3000 GB/s and 580 TFLOP/s on H800,
  FlashMLA README) or the fit of mla.csv, never the prefill attention efficiency.
"""
from __future__ import annotations

import math

import numpy as np

INF_SHARP = 1e6  # a ``sharp`` at or above this is a hard max()


def soft_max(x, y, sharp: float):
    """(x^p + y^p)^(1/p): max(x, y) for p -> inf, up to 2^(1/p) x max where x == y."""
    if sharp >= INF_SHARP:
        return np.maximum(x, y)
    hi = np.maximum(np.maximum(x, y), 1e-300)
    return hi * ((x / hi) ** sharp + (y / hi) ** sharp) ** (1.0 / sharp)


def soft_max_scalar(x: float, y: float, sharp: float) -> float:
    """``soft_max`` for two Python floats (the step models' hot path)."""
    if sharp >= INF_SHARP:
        return x if x > y else y
    hi = x if x > y else y
    if hi <= 0.0:
        return 0.0
    return hi * ((x / hi) ** sharp + (y / hi) ** sharp) ** (1.0 / sharp)


def gemm_s(m, flops, nbytes, peak: float, hbm: float, eff: float, m_tile: float, hbm_eff: float, lat_s: float,
           sharp: float = INF_SHARP):
    """Seconds of a GEMM with ``m`` rows, ``flops`` FLOPs and ``nbytes`` bytes moved."""
    m = np.maximum(m, 1e-9)
    compute = flops * np.maximum(m, m_tile) / m / (peak * eff)
    return lat_s + soft_max(compute, nbytes / (hbm * hbm_eff), sharp)


def moe_balanced(tokens, top_k: int, experts: int, ep: int = 1, tp: int = 1):
    """(assignments on one GPU, experts it touches, in units of whole experts' weights) when
    ``tokens`` route evenly over all experts (the balanced case the MoE tables measure); EP
    splits the experts, TP slices every expert (a GPU holds 1/tp of each)."""
    assign = tokens * top_k / ep
    touched = np.minimum(tokens * top_k, experts) / ep / tp
    return assign, touched


def moe_s(assign, touched, hidden: int, inter: int, wbytes: float, peak: float, hbm: float,
          eff: float, m_tile: float, hbm_eff: float, lat_s: float, tp=1, sharp: float = INF_SHARP):
    """Seconds of one GPU's grouped expert GEMMs (up+gate and down, SwiGLU).

    ``touched`` counts whole experts' weights (a TP slice of 1/tp counts 1/tp); ``m``, the
    GEMM rows per expert, is ``assign / experts``: tokens per touched expert."""
    flops = 6.0 * hidden * inter * assign / tp
    nbytes = touched * 3.0 * hidden * inter * wbytes
    m = assign / np.maximum(touched * tp, 1e-9)
    return gemm_s(m, flops, nbytes, peak, hbm, eff, m_tile, hbm_eff, lat_s, sharp)


def gqa_pair_flops(heads: int, head_dim: int):
    return 4.0 * heads * head_dim


def mla_pair_flops(heads: int, kv_lora: int, rope: int):
    """Weight-absorbed MLA: scores over kv_lora + rope, values over kv_lora, per head."""
    return 2.0 * heads * (2 * kv_lora + rope)


def prefill_attention_s(pairs, pair_flops, peak: float, eff: float, lat_s: float, rows=0.0, row_pairs: float = 0.0):
    """Seconds of causal prefill attention over ``pairs`` token pairs and ``rows`` query tokens
    (module docstring: ``row_pairs`` key columns of per-row work)."""
    return lat_s + (pairs + rows * row_pairs) * pair_flops / (peak * eff)


def decode_attention_s(kv_bytes, flops, peak: float, hbm: float, eff: float, hbm_eff: float, lat_s: float):
    return lat_s + np.maximum(kv_bytes / (hbm * hbm_eff), flops / (peak * eff))


def dram_share(ws_bytes: float, cache_bytes: float, log_width: float) -> float:
    """Share of a decode step's KV reads that come from DRAM, for a step whose working set (its KV
    plus the weights it streams) is ``ws_bytes`` against a last-level cache of ``cache_bytes``
    (calibration.kv_residency). A cyclic sweep of an LRU-like cache is all hits below its size and
    all misses above; ``log_width`` (natural-log units) spreads that cliff as a normal in log size:
    the cache the step finds drifts with what else shares it. 0: the hard cliff."""
    if log_width <= 0.0:
        return 0.0 if ws_bytes <= cache_bytes else 1.0
    return 0.5 * math.erfc(-math.log(ws_bytes / cache_bytes) / (log_width * math.sqrt(2.0)))


def effective_sharp(sharp) -> float:
    """A fitted ``sharp`` as a float (missing or non-finite: a hard max)."""
    try:
        s = float(sharp)
    except (TypeError, ValueError):
        return INF_SHARP
    return s if math.isfinite(s) and s > 0 else INF_SHARP
