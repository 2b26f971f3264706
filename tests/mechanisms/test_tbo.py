"""Two-batch overlap from its parts (pdsim/costs/tbo.py): the phenomenon, against LMSYS's ablation.

Source of every figure: LMSYS blog 2025-05-05, "Deploying DeepSeek with PD Disaggregation and
Large-scale Expert Parallelism on 96 H100 GPUs" (lm-sys/lm-sys.github.io
blog/2025-05-05-large-scale-ep.md), section "Ablation Study: Two-batch Overlap":
- decode (EP72, 9 nodes, 2,000-token context): TBO "yields minimal or negative gains (e.g. -27%
  at 32 tokens/device)"; "the speedup reaches 25.5% at 256 tokens";
- prefill (EP32, 4 nodes): "TBO achieves a 27% to 35% throughput increase compared to the
  vanilla setup, even when processing the same token count per device".
"""
from __future__ import annotations

import dataclasses

import pytest

from pdsim.costs.tbo import tbo_moe_layers
from pdsim.specs.hardware import Efficiency

from ._deepseek import DSV3, H100, decode_s, ep_group, prefill_s


def decode_gain(per_gpu: int) -> float:
    """Throughput with TBO over without, minus 1 (LMSYS's 'speedup')."""
    off = decode_s(H100, DSV3, ep_group(9, True, tbo=False), per_gpu, 2000.0)
    on = decode_s(H100, DSV3, ep_group(9, True, tbo=True), per_gpu, 2000.0)
    return off / on - 1.0


def prefill_gain(per_gpu: int = 8192, hw=H100) -> float:
    off = prefill_s(hw, DSV3, ep_group(4, False, tbo=False), per_gpu, 4096)
    on = prefill_s(hw, DSV3, ep_group(4, False, tbo=True), per_gpu, 4096)
    return off / on - 1.0


def test_decode_tbo_costs_at_small_batch_and_pays_at_large():
    """At 32 sequences per GPU a micro-batch reads the same weights and pays the same fixed
    kernel costs as the whole batch, and there is little communication to hide: TBO loses
    (LMSYS -27%). At 256 it hides the DeepEP legs behind the other micro-batch's compute
    (LMSYS +25.5%)."""
    small, large = decode_gain(32), decode_gain(256)
    assert small < -0.03, small
    assert 0.15 < large < 0.40, large
    gains = [decode_gain(b) for b in (32, 64, 128, 256)]
    assert gains == sorted(gains)  # the gain grows with the batch (LMSYS: a threshold, then gains)


def test_prefill_tbo_gains():
    assert prefill_gain() > 0.15


@pytest.mark.xfail(strict=True, reason="known gap: the model's prefill TBO gain is +48-50% at 8K-16K tokens per GPU "
                   "(two-stream schedule + DeepEP's 24-of-132 SM partition), LMSYS measured +27-35%; LMSYS names "
                   "communication kernels running slower under overlap than alone, a contention the model does not "
                   "price (no source gives its size)")
def test_prefill_tbo_gain_in_lmsys_range():
    assert 0.20 <= prefill_gain() <= 0.40


def test_a_micro_batch_never_hides_its_own_communication():
    """With no compute at all, nothing hides anything: n layers cost 2 x (dispatch + combine)
    each; with compute far larger than communication, a layer costs its compute (plus the fill)."""
    d, c = 1e-3, 2e-3
    assert tbo_moe_layers(0.0, 0.0, d, c, 10) == pytest.approx(10 * 2 * (d + c))
    a, m = 10e-3, 10e-3
    assert tbo_moe_layers(a, m, d, c, 10) == pytest.approx(10 * 2 * (a + m) + c, rel=1e-9)  # the last combine drains


def test_no_loss_constant_and_the_sm_partition_matters():
    """The overlap is built from its parts: no efficiency constant says how much is lost. DeepEP's
    normal kernels hold 24 of 132 SMs while they overlap (DeepEP README), and prefill TBO gains
    less the more SMs they take."""
    assert "tbo_overlap_loss" not in {f.name for f in dataclasses.fields(Efficiency)}
    fewer = dataclasses.replace(H100, efficiency=dataclasses.replace(H100.efficiency, deepep_normal_sm_share=0.0))
    assert prefill_gain(hw=fewer) > prefill_gain(hw=H100) + 0.05
