"""Attention backends as a knob (``engine.attention_backend``): each kernel's efficiency, cited.

Attention is priced by two rooflines (compute.py): prefill is compute-bound (FLOPs at a fraction
``eff`` of the GPU's tensor-core peak), decode is memory-bound (the KV read at a fraction
``hbm_eff`` of HBM bandwidth, or its FLOPs at ``eff`` of peak where heads are many, as MLA's 128
query heads over one latent). A backend is a different kernel for the same work, so it changes
those fractions and nothing else.

``auto`` (the default) is the engine's own choice for the GPU and keeps the priced constants as
they are: the calibration fits (attention.csv: SGLang 0.5.14's FA3 kernels) or the profile's
priors (FlashMLA's figures for MLA decode). SGLang's docs name FA3 the default on Hopper and
FlashInfer elsewhere (docs/backend/attention_backend.md: "FlashAttention 3 (Default for Hopper
Machines, e.g., H100, H200, H20)", "FlashInfer (Default for Non-Hopper Machines, e.g., A100,
A40)"). A named backend scales each constant by its own fraction over the default's fraction
(``scales``): the calibrated level of the GPU stays, the published gap between kernels moves it.

Fractions (of the BF16 tensor-core peak; of HBM bandwidth), one per backend and form:

| backend    | prefill eff | MLA decode hbm / eff | GQA decode hbm | source |
|------------|-------------|----------------------|----------------|--------|
| fa3        | 0.75        | = flashmla (assumed) | 1.0 (reference)| FA3 paper (Shah et al. 2024, arXiv 2407.08608): "up to 740 TFLOPs/s (75% utilization)" BF16 on H100 |
| flashmla   | = flashinfer (its prefill runs FlashInfer's ragged MHA) | 0.895 / 0.586 | n/a (MLA only) | FlashMLA README (deepseek-ai/FlashMLA, H800 SXM5): "up to 3000 GB/s in memory-bound configuration and 580 TFLOPS in computation-bound"; 3352 GB/s, 989 TFLOPS |
| flashinfer | 0.65 (assumed, 0.5-0.75) | 0.84 / 0.35 | 1.0 (assumed, 0.9-1.1) | FlashInfer PR #952 (2025-03-17), its FA3-style MLA kernel before the 2WG pipeline (FlashInfer 0.2.2-0.2.3, SGLang 0.4.x's flashinfer MLA): best 2821 GB/s (batch 768, 64 heads) and 345.7 TFLOPs (128 heads) on a 3352 GB/s, 989 TFLOPS Hopper |
| sdpa_packed | 0.486 (measured on one H200; 0.35-0.77) | n/a (GQA/MHA only) | n/a: its decode runs the prefill kernel (below) | transformers' paged/sdpa attention (integrations/sdpa_paged.py): one PyTorch scaled_dot_product_attention call over the packed batch with a 4-D float mask. Every query of the step meets every key the step reads, decodes included (costs/step.py). Before it, each layer gathers the keys out of the paged cache and copies them out to every query head (packed_key_bytes: (6 + 4g) units a key, g query heads per KV head), at SDPA_PACKED_HBM = 0.241 of the profile's HBM rate (fitted on the burst's step trace, validation/hf-cb-h200-structure/fit_probe.py; 0.18-0.24 on the session's other traces): in a decode step that traffic is the work. Measured: `pdsim calibrate from-steps --param attention` on transformers 5.17's step traces (torch 2.11, calibration/sessions/h200-2026-11-28, validation/hf-cb-h200-fits): fitted with the host constants on the light load and the burst, the kernel runs at 1.39x the rate of the prior 0.35 (the FA3 paper's figure for FA2-style kernels, ~35% of H100 peak), so 0.35 x 1.39 = 0.486 here, with the engine's small kernels priced unfused (engine.elementwise; 1.33x with them fused, 1.61x before the key copies were priced and the eager issue hid the attention); other GPUs and torch versions are unmeasured |
| triton     | 0.45 (assumed, 0.35-0.6) | 0.6 / 0.25 (assumed, 0.4-0.8 / 0.15-0.35) | 0.8 (assumed, 0.6-1.0) | no published kernel figure: SGLang PR #3550 (FlashInfer MLA for DeepSeek-V3) measured 3.93x the Triton backend's throughput at 32K-token prompts; FA3 paper: FA2-style kernels (no WGMMA) reach ~35% of H100 peak; FlashAttention issue #1310 (H20): FA2 causal head-dim 128 at 0.45 of peak |
| torch_native | the CPU profile's own SDPA rows (cpu_profile.py measure --attention sdpa) | n/a (GQA/MHA only) | the profile's | SGLang's torch-native backend (layers/attention/torch_native_backend.py): one causal scaled_dot_product_attention per sequence, its query spanning the whole sequence, prefix included, so a chunk after the first recomputes the earlier chunks' attention (sim/engine/admission.py prices those pairs). CPU profiles only: the SGLang CPU validation (validation/cpu-sglang-emr-*) |

Each assumed figure is a module constant that ``pdsim sensitivity`` perturbs over its stated range
(calibrate/sensitivity.py, ``ASSUMPTIONS``) where a scenario uses that backend.

Which backends exist for which model follows the engines (pdsim/launch): FlashMLA is an MLA
decode kernel; FA3 and FlashMLA are Hopper kernels (SM90); elsewhere FlashInfer and Triton.
"""
from __future__ import annotations

from types import SimpleNamespace

from ..specs.attention_backend import BACKENDS, check_backend  # noqa: F401  (re-exported for the step models)

# -- cited fractions ----------------------------------------------------------------------------
FA3_PREFILL = 740.0 / 989.0  # FA3 paper: 740 TFLOPs/s BF16 on H100 SXM (989 dense)
FLASHMLA_DECODE_HBM = 3000.0 / 3352.0  # FlashMLA README, H800 SXM5
FLASHMLA_DECODE_EFF = 580.0 / 989.0
FLASHINFER_MLA_DECODE_HBM = 2821.32 / 3352.0  # FlashInfer PR #952, before the 2WG pipeline
FLASHINFER_MLA_DECODE_EFF = 345.74 / 989.0
# -- assumptions (perturbed by pdsim sensitivity over the ranges in the docstring) --------------
FA3_MLA_DECODE = 1.0  # FA3's MLA decode relative to FlashMLA's (SGLang's fa3 MLA path; no kernel figure)
FLASHINFER_PREFILL = 0.65  # FlashInfer's SM90 prefill template (FA3-style), below FA3's 0.75
FLASHINFER_GQA_DECODE = 1.0  # FlashInfer GQA decode HBM fraction relative to FA3's
TRITON_PREFILL = 0.45
TRITON_MLA_DECODE_HBM = 0.6
TRITON_MLA_DECODE_EFF = 0.25
TRITON_GQA_DECODE = 0.8  # relative to FA3's HBM fraction
SDPA_PACKED = 0.486  # PyTorch SDPA under a 4-D mask: measured on an H200 (the table), 0.35-0.77 elsewhere
# transformers' paged|sdpa moves every key it reads through HBM several times a layer
# (packed_key_bytes); the share of the profile's effective HBM bandwidth those copies and the
# masked SDPA's reads reach: 0.241, fitted on one H200 step trace (Llama-3.1-8B, the burst of 128
# requests, calibration/sessions/h200-2026-11-28/run1/burst, torch 2.11 cuDNN SDPA;
# validation/hf-cb-h200-structure/fit_probe.py; 0.236 with the small kernels priced fused),
# 0.18-0.24 over that session's other traces (fused); held out, Qwen2.5-14B's knee (another model,
# group size and machine start) prices at 1.00 by median. A masked SDPA over a few queries and many keys runs on a few SMs (one query tile per head)
SDPA_PACKED_HBM = 0.241


def default_backend(arch: str) -> str:
    """The engine's choice where ``auto``: FA3 on Hopper, FlashInfer elsewhere (SGLang docs)."""
    return "fa3" if arch == "hopper" else "flashinfer"


def packed_key_bytes(group: float, kv_bytes_per_key: float) -> tuple[float, float]:
    """Bytes of HBM traffic per key read, per layer, under transformers' paged|sdpa
    (transformers/integrations/sdpa_paged.py, generation/continuous_batching/cache.py), as
    (copies, the SDPA's own reads); ``kv_bytes_per_key``: the key's K and V as cached (2 units of
    kv heads x head_dim x bytes), ``group``: query heads per KV head (g). Every step, each layer:
    ``cache.update`` gathers the keys and values the batch reads out of the paged cache
    (``index_select``: read and write K and V, 4 units); ``repeat_kv`` expands them to every query
    head (read 2, write 2g: a reshape of an expanded view copies); the masked SDPA then reads the
    expanded K and V (2g), once per query tile. The copies are kernels of their own; the SDPA's
    reads overlap its arithmetic. A paged kernel (FA3, FlashInfer) reads the 2 units once."""
    unit = kv_bytes_per_key / 2.0
    return (6.0 + 2.0 * group) * unit, 2.0 * group * unit


def _fractions(backend: str, mla: bool) -> tuple[float, float, float]:
    """(prefill eff, decode hbm_eff, decode eff) of ``backend``; GQA decode in units of FA3's
    HBM fraction (its compute term is small), so eff there is 1."""
    g = globals()  # read at call time: pdsim sensitivity patches the assumptions in place
    flashinfer_pf = g["FLASHINFER_PREFILL"]
    if backend == "fa3":
        if mla:
            return g["FA3_PREFILL"], g["FLASHMLA_DECODE_HBM"] * g["FA3_MLA_DECODE"], \
                g["FLASHMLA_DECODE_EFF"] * g["FA3_MLA_DECODE"]
        return g["FA3_PREFILL"], 1.0, 1.0
    if backend == "flashmla":
        return flashinfer_pf, g["FLASHMLA_DECODE_HBM"], g["FLASHMLA_DECODE_EFF"]
    if backend == "flashinfer":
        if mla:
            return flashinfer_pf, g["FLASHINFER_MLA_DECODE_HBM"], g["FLASHINFER_MLA_DECODE_EFF"]
        return flashinfer_pf, g["FLASHINFER_GQA_DECODE"], 1.0
    if backend == "sdpa_packed":  # GQA only (specs/attention_backend.py); decode is the packed prefill
        return g["SDPA_PACKED"], 1.0, 1.0
    if backend == "triton":
        if mla:
            return g["TRITON_PREFILL"], g["TRITON_MLA_DECODE_HBM"], g["TRITON_MLA_DECODE_EFF"]
        return g["TRITON_PREFILL"], g["TRITON_GQA_DECODE"], 1.0
    raise KeyError(backend)


def scales(backend: str, mla: bool, arch: str) -> tuple[float, float, float]:
    """(prefill eff, decode hbm_eff, decode eff) multipliers of the priced constants for
    ``backend`` on ``arch``: its fractions over those of the engine's default there; all 1 for
    ``auto`` and for the default itself, and for ``torch_native``: a CPU profile's own SDPA timings
    (cpu_profile.py measure --attention sdpa) are that backend's kernel; it differs in the work
    (sim/engine/admission.py), not the rate."""
    if backend in ("auto", "torch_native"):
        return 1.0, 1.0, 1.0
    ref = _fractions(default_backend(arch), mla)
    own = _fractions(backend, mla)
    return own[0] / ref[0], own[1] / ref[1], own[2] / ref[2]


def apply(kernels: SimpleNamespace, backend: str, mla: bool, arch: str) -> SimpleNamespace:
    """The kernel constants (roofline._kernels' namespace) with the attention backend applied;
    fractions stay at most 1."""
    if backend in ("auto", "torch_native"):
        return kernels
    pf, hbm, eff = scales(backend, mla, arch)
    pa, da = kernels.prefill_attn, kernels.decode_attn
    kernels.prefill_attn = SimpleNamespace(**{**vars(pa), "eff": min(1.0, pa.eff * pf)})
    kernels.decode_attn = SimpleNamespace(**{**vars(da), "hbm_eff": min(1.0, da.hbm_eff * hbm),
                                             "eff": min(1.0, da.eff * eff)})
    return kernels
