"""What DeepEP's normal kernels take from the compute beside them under two-batch overlap: the SM
partition (issue 23 item 2), as factors on a micro-batch's compute (dimensionless).

SGLang's prefill TBO runs DeepEP's normal kernels on ``share`` of the SMs (24 of 132,
``efficiency.deepep_normal_sm_share``) and tells DeepGEMM to use the rest for the whole forward
(``deep_gemm_num_sms = total - DeepEPConfig.num_sms``). What that costs is measured on pdsim's own
H100 rather than taken as the proportional 1 / (1 - share) (tbo.py prices the schedule; this
module prices the kernels' slowdown inside it).
"""
from __future__ import annotations

# What the SM partition costs the compute, as multiples k of the proportional loss share / (1 -
# share) (0.222 at 24 of 132 SMs), measured on pdsim's own H100 (calibration/data/overlap.csv,
# calibration/microbench/gpu_overlap.py; pdsim.calibrate.fit_overlap recomputes them, and
# tests/mechanisms/test_tbo_measured.py checks these constants against the rows):
# - GEMM_CARVEOUT_K: an FP8 GEMM told to leave 24 SMs free, alone on the GPU: 1.130x (median of 43
#   shape x run points, 1.05-1.34 beside one noisy 0.57: run 6's all-SM time of one M 1024 shape was
#   3x the other runs'), not 1.222x;
# - GEMM_BESIDE_K: the same GEMM while a DeepEP-like kernel runs on those 24 SMs (one 1024-thread
#   CTA per SM streaming ~0.56 TB/s of HBM, launched first): 1.330x of the GEMM alone with all SMs
#   (median of 17 points, 1.09-1.72; two machines: 1.324 and 1.343): the neighbour costs more
#   than its SMs;
# - OTHER_BESIDE_K: FlashAttention prefill (SDPA, not carved out) beside the same kernel: 1.033x
#   (3 runs, 1.01-1.05), far less than losing 24 SMs.
# The GEMMs are cuBLASLt's (torch._scaled_mm), not DeepGEMM; other GPUs take H100's k at their
# own share (an assumption, range in ``pdsim sensitivity``).
GEMM_CARVEOUT_K = 0.58
GEMM_BESIDE_K = 1.48
OTHER_BESIDE_K = 0.15


def sm_stretch(compute: float, comm: float, share: float, hbm_share: float = 0.0) -> tuple[float, float, float]:
    """(GEMM factor, other-kernel factor, memory-bound-kernel factor) by which DeepEP's normal
    kernels stretch a micro-batch's compute. DeepGEMM runs with ``share`` of the SMs carved out
    throughout the TBO forward (``GEMM_CARVEOUT_K``), and slower still for the part of its time a
    communication kernel runs beside it (``GEMM_BESIDE_K``; at most all of it: ``comm`` against
    ``compute``); other kernels slow for that part only (``OTHER_BESIDE_K``); memory-bound kernels
    also lose ``hbm_share`` of the HBM bandwidth then (``copy_hbm_share``). Each k is a multiple of
    the proportional loss ``share / (1 - share)``, measured on an H100 (above)."""
    if compute <= 0.0 or (share <= 0.0 and hbm_share <= 0.0):
        return 1.0, 1.0, 1.0
    overlap = comm / compute
    if overlap > 1.0:
        overlap = 1.0
    prop = share / (1.0 - share)
    g = 1.0 + prop * (GEMM_CARVEOUT_K + overlap * (GEMM_BESIDE_K - GEMM_CARVEOUT_K))
    f = 1.0 + overlap * OTHER_BESIDE_K * prop
    return g, f, f * (1.0 + overlap * hbm_share / (1.0 - hbm_share))
