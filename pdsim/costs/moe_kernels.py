"""The routed-expert GEMM kernel under expert parallelism (DeepGEMM's grouped FP8 GEMMs), as the
step models price it: the fitted or prior GEMM constants, with two properties of the kernel that
the dense-GEMM data does not show.

1. Weights stream from HBM. In a serving step every expert's weights are read once per layer
   and nothing stays in L2 between layers, so a small-M grouped GEMM is bound by the weight
   stream at the bandwidth DeepGEMM reaches with a cold L2. DeepGEMM's README (H800, 3352 GB/s,
   benchmarks with the L2 flushed) gives, at M = 64 for DeepSeek's expert shapes, 2320 GB/s
   (N 4096, K 7168: gate+up) and 2470 GB/s (N 7168, K 2048: down): 0.69 and 0.74 of HBM, mean
   ``DEEPGEMM_WEIGHT_HBM`` = 0.715; its other M = 64 rows span 0.50-0.80. The fitted
   ``hbm_eff`` of the dense-GEMM tables (AIConfigurator: weights that fit in the 50 MB L2 and are
   re-read between repeats) comes out at 1.0, so the expert GEMM takes the smaller of the two.
   The fraction is carried to other Hopper GPUs at their own HBM bandwidth (an assumption,
   perturbed by ``pdsim sensitivity`` by +-15%).
2. swapAB (``moe_runner: deepgemm_swapab``, DeepGEMM PR #192, Ant Group on H20, LMSYS blog
   2025-09-26): the masked grouped GEMM puts tokens on the WGMMA N side, so a skinny expert pads
   its rows to 32 instead of the 64-row M tile ("M is fixed at 64 ... enables smaller BLOCK_M
   (32)"). The gain is the tile-padding compute avoided, and only where the padded compute
   exceeded the weight stream: per expert max(c x 64, w) - max(c x 32, w), with c the seconds
   per row and w the weight read of (1). With (1) the H20 EP16 decode gain at batch 4 is ~+22%
   (Ant: +7.7%); with the L2-resident 1.0 it was +31%.
"""
from __future__ import annotations

from types import SimpleNamespace

DEEPGEMM_WEIGHT_HBM = (2320.0 + 2470.0) / 2.0 / 3352.0  # DeepGEMM README, H800, M = 64 expert shapes
SWAPAB_TILE = 32.0  # rows a swapAB masked grouped GEMM pads a skinny expert to (Ant Group, LMSYS 2025-09-26)


def expert_gemm(g: SimpleNamespace, runner: str, deepgemm: bool) -> SimpleNamespace:
    """Kernel constants (compute.py's GEMM form) of the routed-expert GEMM: ``g`` the GEMM
    constants it runs at; ``deepgemm`` True where DeepGEMM's grouped kernel runs the experts
    (expert parallelism, FP8, ``moe_runner`` deepgemm or deepgemm_swapab)."""
    if not deepgemm:
        return g
    out = {**vars(g), "hbm_eff": min(g.hbm_eff, globals()["DEEPGEMM_WEIGHT_HBM"])}
    if runner == "deepgemm_swapab":
        out["m_tile"] = min(g.m_tile, SWAPAB_TILE)
    return SimpleNamespace(**out)
