"""Two-batch overlap from SGLang's own stage schedule (pdsim/costs/tbo.py): the phenomenon,
against LMSYS's ablation.

Source of every figure: LMSYS blog 2025-05-05, "Deploying DeepSeek with PD Disaggregation and
Large-scale Expert Parallelism on 96 H100 GPUs" (lm-sys/lm-sys.github.io
blog/2025-05-05-large-scale-ep.md), section "Ablation Study: Two-batch Overlap":
- decode (EP72, 9 nodes, 2,000-token context): TBO "yields minimal or negative gains (e.g. -27%
  at 32 tokens/device)"; "the speedup reaches 25.5% at 256 tokens"; simulated MTP (128 requests,
  256 tokens per step, 4,000-token KV, slowed attention): "a 35% speedup at 128 sequences/device",
  "due to prolonged attention processing time, which aligns computation (e.g., DP Attention
  layers) with DeepEP communication";
- prefill (EP32, 4 nodes): "TBO achieves a 27% to 35% throughput increase compared to the
  vanilla setup, even when processing the same token count per device".
Sources of the kernel-level parts: LMSYS's "Prefill Time Breakdown" and "Decode Time Breakdown"
figures in the same blog (DeepSeek's H800 profile against DeepEP's unit test, scaled ms per
layer); AIConfigurator-core 0.12.0's H100 SGLang DeepEP low-latency table
(calibration/data/deepep_low_latency.csv); DeepEP csrc/kernels/legacy/internode_ll.cu (send and
receive phases).
Source of the schedule: SGLang python/sglang/srt/operations_strategy.py
(``_compute_moe_deepseek_blog_prefill`` / ``_decode``, ``tbo_delta_stages`` 0 / 2) and
operations.py (``execute_overlapped_operations``).
"""
from __future__ import annotations

import dataclasses
import random

import pytest

from pdsim.costs import tbo as tbo_mod
from pdsim.costs.sm_partition import sm_stretch
from pdsim.costs.tbo import (attention_core_share, copy_hbm_share, decode_forward, decode_layer, prefill_forward,
                             prefill_layer, tbo_forward)
from pdsim.sim.engine.executor import LocalExecutor
from pdsim.specs.hardware import Efficiency

from . import _deepseek
from ._deepseek import DSV3, H100, cost, decode_s, ep_group, prefill_s


def _clear_costs() -> None:
    _deepseek._COSTS.clear()  # costs are built once per argument set; a module constant changed


def decode_gain(per_gpu: int, context: float = 2000.0) -> float:
    """Throughput with TBO over without, minus 1 (LMSYS's 'speedup')."""
    off = decode_s(H100, DSV3, ep_group(9, True, tbo=False), per_gpu, context)
    on = decode_s(H100, DSV3, ep_group(9, True, tbo=True), per_gpu, context)
    return off / on - 1.0


def prefill_gain(per_gpu: int = 8192, hw=H100) -> float:
    off = prefill_s(hw, DSV3, ep_group(4, False, tbo=False), per_gpu, 4096)
    on = prefill_s(hw, DSV3, ep_group(4, False, tbo=True), per_gpu, 4096)
    return off / on - 1.0


def test_decode_tbo_costs_at_small_batch_and_pays_at_large():
    """At 32 sequences per GPU each micro-batch reads the same weights and pays the same kernel
    latencies as the whole batch, for little communication to hide: TBO loses (LMSYS -27%). At
    256 the attention of one micro-batch hides much of the other's DeepEP legs (LMSYS +25.5%)."""
    small, large = decode_gain(32), decode_gain(256)
    assert small < -0.03, small
    assert 0.15 < large < 0.35, large
    gains = [decode_gain(b) for b in (32, 64, 128, 256)]
    assert gains == sorted(gains)  # the gain grows with the batch (LMSYS: a threshold, then gains)


def test_decode_hides_communication_behind_attention_only():
    """SGLang's decode order puts a dispatch between its own shared experts and the other
    micro-batch's attention prepare, a combine beside the other's attention core: the routed
    experts hide nothing. With no attention, every transfer is exposed; in prefill's order the
    same experts hide the other micro-batch's dispatch."""
    x, d, c, n = 100e-6, (0.0, 10e-6, 40e-6), (0.0, 10e-6, 80e-6), 20
    exposed = tbo_forward(decode_layer(0.0, 0.0, 0.0, x, d, c), n, 2, False)
    assert exposed == pytest.approx(n * 2 * (x + sum(d) + sum(c)), rel=1e-9)
    core = 2 * sum(c)  # an attention core longer than a combine
    hidden = tbo_forward(decode_layer(0.0, core, 0.0, x, d, c), n, 2, False)
    assert hidden < exposed + n * 2 * (core - 0.9 * sum(c))  # it absorbed (nearly) every combine
    assert tbo_forward(prefill_layer(0.0, 0.0, x, d, c), n, 0, True) < 0.8 * exposed


def test_decode_gain_grows_with_attention_time():
    """Longer contexts lengthen the attention stages that hide the DeepEP legs: LMSYS's simulated
    MTP (128 requests x 2 tokens, 4,000-token KV) gains most (+35%), more than plain decode at
    256 x 2,000 (+25.5%)."""
    b = 128 * 72
    off, on = (cost("calibrated", H100, DSV3, ep_group(9, True, tbo=t), "decode").step_time(
        0, 0.0, 0, b, b * 4000.0, decode_tokens_per_seq=2) for t in (False, True))
    mtp = off / on - 1.0
    assert mtp > decode_gain(256) + 0.05, (mtp, decode_gain(256))
    assert 0.25 < mtp < 0.50, mtp
    # +13% at 500 tokens, +21% at 4,000 (no published figure sizes this step: the direction is
    # the phenomenon; the margin was 0.1 when the decode imbalance was priced at 1.38x, larger
    # DeepEP legs that only the longer attention hid)
    assert decode_gain(128, 500.0) < decode_gain(128, 4000.0) - 0.05


def test_decode_tbo_step_follows_its_own_context():
    """The hiding depends on the step's attention, so the cost is not linear in the context: the
    world prices each step (``linear`` False); the coefficient triple (least attention) bounds it
    from above, and the step still grows with the context."""
    c = cost("calibrated", H100, DSV3, ep_group(9, True, tbo=True), "decode")
    assert c.linear is False and LocalExecutor(c).linear is False
    b = 256 * 72
    c0, _, cc = c.step_coeffs(0, 0, b)
    times = [c.step_time(0, 0.0, 0, b, b * ctx) for ctx in (0.0, 1000.0, 2000.0, 4000.0)]
    assert times == sorted(times)
    assert times[2] < c0 + cc * b * 2000.0
    assert sum(c.breakdown(0, 0.0, 0, b, b * 2000.0).values()) == pytest.approx(times[2], rel=1e-12)
    assert cost("calibrated", H100, DSV3, ep_group(4, False, tbo=True), "prefill").linear  # prefill: least work is exact


def test_dense_layers_run_outside_tbo():
    """SGLang starts TBO at ``first_k_dense_replace`` (DeepseekV2Model.forward): DeepSeek's three
    dense layers run the whole batch, priced the same with and without TBO."""
    t = 8192 * 32
    parts = [cost("calibrated", H100, DSV3, ep_group(4, False, tbo=x), "prefill").breakdown(t, t * 2048.0, t // 4096, 0, 0.0)
             for x in (False, True)]
    assert parts[0]["mlp"] == pytest.approx(parts[1]["mlp"], rel=1e-12)


def test_attention_core_share_is_the_weights_after_the_kernel():
    """DeepSeek-V3 MLA: w_vc (512 x 128 x 128) and o_proj (128 x 128 x 7168) of 187M attention
    parameters per layer run after the attention kernel (SGLang op_core): 0.67."""
    assert attention_core_share(DSV3) == pytest.approx((512 * 128 * 128 + 128 * 128 * 7168) / DSV3.attn_params)
    assert 0.6 < attention_core_share(DSV3) < 0.7


def test_prefill_tbo_gains():
    assert prefill_gain() > 0.15


@pytest.mark.xfail(strict=True, reason="known gap: +40.3% at 8K tokens per GPU (LMSYS +27-35%) with the SM "
                   "partition and the compute beside DeepEP measured on pdsim's own H100 (GEMM 1.13x carved out, "
                   "1.33x beside a DeepEP-like kernel, attention 1.03x: test_tbo_measured.py), the copies' HBM "
                   "share and DeepEP normal kernels 1.31x / 1.21x slower beside compute (DeepSeek's profile). Not "
                   "priced: the cross-rank barrier beside each normal kernel (~1 ms per call in DeepSeek's profile "
                   "and in SGLang's TBO-8K breakdown); LMSYS's TBO-8K breakdown has non-MoE GEMMs 1.78x their "
                   "no-TBO time (10.7 vs 6.0 scaled ms per layer), beyond the 1.13-1.72x measured here")
def test_prefill_tbo_gain_in_lmsys_range():
    assert 0.27 <= prefill_gain() <= 0.35


def _with(attr: str, value, fn):
    old = getattr(tbo_mod, attr)
    setattr(tbo_mod, attr, value)
    try:
        _clear_costs()
        return fn()
    finally:
        setattr(tbo_mod, attr, old)
        _clear_costs()


def test_normal_kernels_run_slower_beside_compute():
    """DeepEP's normal kernels share HBM and L2 with the compute on the other SMs: DeepSeek's own
    H800 prefill profile (EP32, 16K tokens per GPU, balanced routing) against DeepEP's unit test,
    as LMSYS's "Prefill Time Breakdown" figure (blog 2025-05-05, scaled ms per layer) shows them:
    dispatch core 9.4 vs 7.2, combine core 17.2 vs 14.2. With the kernels at unit-test speed the
    prefill TBO gain is ~9 points higher: the communication of a micro-batch nearly fills the
    other's compute, so its slowdown comes out of the overlap."""
    assert tbo_mod.NORMAL_OVERLAP_SLOWDOWN == pytest.approx((9.4 / 7.2, 17.2 / 14.2))
    slowed = prefill_gain()
    unit = _with("NORMAL_OVERLAP_SLOWDOWN", (1.0, 1.0), prefill_gain)
    assert unit > slowed + 0.05, (unit, slowed)
    assert 0.30 < slowed < 0.45, slowed


def test_low_latency_kernels_keep_their_launch_and_copy_on_the_stream():
    """With the receive hook, SGLang runs a low-latency kernel's send and receive on its one stream
    (DeepEP legacy internode_ll.cu): the launches, the count polling (``LL_STREAM_SHARE`` of the
    fitted intranode base, 12.8 / 13.6 us on H100, less ~1 us of NVLink latency in flight) and
    the receive copy cannot hide; the per-remote-pair NIC messages (deepep.py) are in flight. At LMSYS's decode (EP72, 256 per GPU: 128 per
    micro-batch) that stream time is ~48 us (dispatch) and ~60 us (combine) per layer, the size
    of the DeepEP unit test's "potential of 0.06 ms occupying SMs" for dispatch and ~0.075 ms for
    combine in LMSYS's decode breakdown. It makes small batches lose more (LMSYS -27% at 32) and
    leaves large ones alone, where a late receive waits anyway (+25.5% at 256); 64 gains little
    and 128 much (LMSYS: "a threshold between 64 and 128")."""
    c = cost("calibrated", H100, DSV3, ep_group(9, True, tbo=True), "decode")
    x = 128.0 * c.expert_load.imbalance(256 * 72 * 8)  # the hottest receiver's tokens per micro-batch
    legs = tbo_mod.ll_stream_legs(c.a2a_ll, (tbo_mod.ll_recv_bytes(7168, 8, 1 + 4 / 128, False),
                                             tbo_mod.ll_recv_bytes(7168, 8, 2.0, True)), 3352e9 * 0.8,
                                  c.a2a_ll_pairs)
    (ds0, _, ds1, _), (cs0, _, cs1, _) = legs
    assert 25e-6 < 2 * (ds0 + ds1 * x) < 90e-6  # LMSYS unit test: 60 us per layer
    assert 35e-6 < 2 * (cs0 + cs1 * x) < 110e-6  # ~75 us
    for (s0, f0, s1, f1), (b, sm, fl) in zip(legs, c.a2a_ll):  # the fitted kernel time is kept
        assert s0 + f0 == pytest.approx(b) and s1 + f1 == pytest.approx(sm + fl)
    small = decode_gain(32)
    assert _with("LL_STREAM_SHARE", 0.0, lambda: decode_gain(32)) > small + 0.03
    assert _with("LL_STREAM_SHARE", 0.0, lambda: decode_gain(256)) == pytest.approx(decode_gain(256), abs=0.01)
    assert small < -0.15, small
    assert decode_gain(64) < 0.10 < 0.15 < decode_gain(128)


def test_no_loss_constant_and_the_sm_partition_matters():
    """The overlap is built from its parts: no efficiency constant says how much is lost. DeepEP's
    normal kernels hold 24 of 132 SMs while they overlap (DeepEP README), and prefill TBO gains
    less the more SMs they take."""
    assert "tbo_overlap_loss" not in {f.name for f in dataclasses.fields(Efficiency)}
    fewer = dataclasses.replace(H100, efficiency=dataclasses.replace(H100.efficiency, deepep_normal_sm_share=0.0))
    assert prefill_gain(hw=fewer) > prefill_gain(hw=H100) + 0.05


def test_copies_take_hbm_from_memory_bound_kernels():
    """A DeepEP normal kernel at H100 EP32 (FP8 dispatch, 8 experts over 4 nodes) moves its RDMA
    copies and the NVLink forwarding copies inside the receiving node at once (comm.deepep_legs:
    ~6.3 forwarded copies per token at EP32): ~145 GB/s of link bytes while it runs, each byte
    through HBM ``COPY_HBM_PASSES`` (4) times, ~22% of the achievable 2.7 TB/s. Memory-bound
    kernels beside it (norms, quantisation, activation, permutation) slow by that share; GEMMs
    and the attention core are compute-bound at prefill sizes. The share is an assumption with a
    range (2-6 passes, registered with ``pdsim sensitivity``): more copies, less gain, and at
    twice the passes the gain falls by under 10 points."""
    share = copy_hbm_share(145e9, 3352e9 * 0.8)
    assert 0.18 < share < 0.26, share
    g, f, fm = sm_stretch(1.0, 1.0, 0.18, share)
    assert fm == pytest.approx(f * (1 + share / (1 - share)))
    base = prefill_gain()
    tbo_mod.COPY_HBM_PASSES, old = 8.0, tbo_mod.COPY_HBM_PASSES
    try:
        _clear_costs()
        more = prefill_gain()
    finally:
        tbo_mod.COPY_HBM_PASSES = old
        _clear_costs()
    assert base - 0.10 < more < base


def test_the_fast_schedules_are_the_stage_schedule():
    """step.py prices every decode step with ``decode_forward`` / ``prefill_forward``; they are
    ``tbo_forward`` over SGLang's operation lists, written out."""
    rng = random.Random(3)
    for _ in range(400):
        v = [rng.choice([0.0, rng.random(), rng.random() * 1e-2]) for _ in range(10)]
        n = rng.choice([1, 2, 3, 5, 6, 58])
        d, c, flag = tuple(v[4:7]), tuple(v[7:10]), rng.random() < 0.5
        assert decode_forward(*v[:4], d, c, n, flag) == pytest.approx(
            tbo_forward(decode_layer(*v[:4], d, c), n, 2, flag), rel=1e-12, abs=1e-15)
        assert prefill_forward(v[0], v[2], v[3], d, c, n, flag) == pytest.approx(
            tbo_forward(prefill_layer(v[0], v[2], v[3], d, c, flag), n, 0, True), rel=1e-12, abs=1e-15)
