"""Kernel backends are knobs (engine.moe_runner, engine.moe_a2a_backend), each priced from its
own source:
- ``deepgemm``: DeepEP + DeepGEMM's grouped FP8-block GEMM (calibration gemm_fp8_block, from
  AIConfigurator's H100/H200 DeepGEMM tables, calibration/data/gemm.csv);
- ``triton``: SGLang's fused Triton MoE (calibration moe_fp8_block, calibration/data/moe.csv):
  0.22 of FP8 peak at large M on H100 against DeepGEMM's 0.58;
- ``deepgemm_swapab``: tokens on WGMMA's N side, rows padded to half the 64-row tile (LMSYS blog
  2025-09-26, Ant Group on H20: "M is fixed at 64 ... swapAB ... enables smaller BLOCK_M (32)";
  "+8.1% at BS=2 and +7.7% at BS=4" decode throughput);
- ``moe_a2a_backend: none``: SGLang without an all-to-all backend runs every EP rank's experts
  over all tokens and sums the partial outputs (an all-reduce over the EP group) instead of
  DeepEP's dispatch and combine.
"""
from __future__ import annotations

from pdsim.specs.scenario import EngineSpec, GroupSpec

from ._deepseek import DSR1, DSV3, H20, H100, cost, decode_s, ep_group, prefill_s


def test_triton_fused_moe_is_slower_than_deepgemm_at_large_m_on_h100():
    t = prefill_s(H100, DSV3, ep_group(4, False, moe_runner="triton"), 8192, 4096)
    d = prefill_s(H100, DSV3, ep_group(4, False), 8192, 4096)
    assert t > 1.2 * d


def test_swapab_helps_small_batch_decode_on_h20():
    def step(runner):
        g = GroupSpec(nodes=2, dp=16, ep=16, enable_dp_attention=True,
                      engine=EngineSpec(deepep_mode="low_latency", kv_cache_dtype="fp8", moe_runner=runner))
        return decode_s(H20, DSR1, g, 4, 4864.0)
    gain = step("deepgemm") / step("deepgemm_swapab") - 1
    # Ant Group: +7.7% at batch 4. The model gives ~+30%: it prices the 64-row padding of a
    # masked grouped GEMM as fully compute-bound on H20, which over-states what swapAB saves
    # (a known gap, reported); the direction is the mechanism's
    assert gain > 0.02, gain


def test_without_deepep_the_moe_exchange_is_an_all_reduce():
    g = ep_group(2, True, moe_a2a_backend="none")
    c = cost("calibrated", H100, DSV3, g, "decode")
    b = 64 * g.dp
    moe_comm = c.breakdown(0, 0.0, 0, b, b * 2000.0)["comm"]
    ar0, ar1 = c.c_ar_world
    want = DSV3.n_moe_layers * (ar0 + ar1 * b * DSV3.hidden * 2.0) + c.c_dp_sync
    assert moe_comm == want or abs(moe_comm - want) < 1e-9 * want
