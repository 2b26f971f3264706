"""Speculative decoding prices every pass of SGLang's EAGLE step as its source runs it
(costs/speculative.py): num_steps - 1 draft passes, the target's verify, the draft extend over
num_steps + 1 tokens with one logit row per sequence, the sampling kernels and the host syncs.

Source of the figures: Ant Group, LMSYS blog 2025-09-26 "Together with SGLang: Best Practices
for Serving DeepSeek-R1 on H20-96G", "Config for MTP": at batch 32 per GPU (attention DP16 +
EP16), more draft tokens lower throughput from 675 to 554 tok/s per GPU (~18% loss: the shorter
accept length per draft wastes compute on a compute-poor GPU); at batch 1 they raise it from 43
to 52 tok/s (~21% gain). Accept lengths 1.85 / 2.55 / 3.1 for 1 / 2 / 3 draft steps (the same
blog; specs/features.DEEPSEEK_MTP_ACCEPT).

Source of the structure: SGLang's EAGLE worker (python/sglang/srt/speculative/eagle_worker.py,
eagle_info.py, eagle_draft_cuda_graph_runner.py, eagle_draft_extend_cuda_graph_runner.py; Ant
Group's h20-blog-20250926 branch): ``draft_forward`` breaks before its last forward (the first
draft token comes from the previous draft extend), the draft extend captures only each
sequence's last hidden state, and the step reads device values five times (plus the DP
batch-size all-gather), with the overlap scheduler off.
"""
from __future__ import annotations

import dataclasses

import pytest

from pdsim.costs.registry import build_step_cost
from pdsim.costs.speculative import (BORROWED_LAUNCH_HOST_US, DP_HOST_SYNCS_PER_STEP, HOST_SYNCS_PER_STEP,
                                     SpeculativeStepCost, host_sync_s, mtp_draft_model)
from pdsim.specs.features import ExpertLoadSpec, SpeculativeSpec
from pdsim.specs.scenario import EngineSpec, GroupSpec

from ._deepseek import DSR1, H100, H20, mtp_tok_s_per_gpu


def test_more_draft_tokens_cost_at_batch_32():
    one, two, three = (mtp_tok_s_per_gpu(32, s) for s in (1, 2, 3))
    assert two < one and three < two
    assert three / one - 1 < -0.09  # Ant: -18% (pdsim -11.0%)


def test_more_draft_tokens_pay_at_batch_1():
    one, three = mtp_tok_s_per_gpu(1, 1), mtp_tok_s_per_gpu(1, 3)
    assert three / one - 1 > 0.10  # Ant: +21% (pdsim +42.6%: the gap docs/mechanisms/speculative.md leaves open)


def _costs(steps: int):
    g = GroupSpec(nodes=2, dp=16, ep=16, enable_dp_attention=True,
                  engine=EngineSpec(deepep_mode="low_latency", kv_cache_dtype="fp8", moe_runner="deepgemm_swapab",
                                    cuda_graph_max_bs=64))
    spec = SpeculativeSpec(num_steps=steps, num_draft_tokens=steps + 1)
    model = dataclasses.replace(DSR1, mtp_layers=1)
    load = ExpertLoadSpec(eplb=True)
    target = build_step_cost("calibrated", H20, model, g, "decode", expert_load=load)
    draft = build_step_cost("calibrated", H20, mtp_draft_model(model, spec), g, "decode", with_overhead=False,
                            expert_load=load)
    return target, draft, SpeculativeStepCost(target, draft, spec)


def test_one_draft_step_runs_only_the_draft_extend_and_each_more_step_one_draft_pass():
    b, ctx = 16, 16 * 4864.0
    extra = {}
    for steps in (1, 2, 3):
        target, draft, spec = _costs(steps)
        q = steps + 1
        extra[steps] = spec.step_time(0, 0.0, 0, b, ctx) - target.step_time(0, 0.0, 0, b, ctx, decode_tokens_per_seq=q)
        ext = draft.breakdown(0, 0.0, 0, b, ctx, decode_tokens_per_seq=q)
        one = draft.breakdown(0, 0.0, 0, b, ctx)
        # the draft extend, its LM head over one row per sequence, no draft forward at one step
        extend = sum(ext.values()) - ext["lm_head"] + one["lm_head"]
        # the sampling kernels, the host syncs, and MTP's eh_proj in every draft forward
        fixed = spec.sync + spec._sampling_s(b) + (steps - 1) * spec._fuse(b / 16) + spec._fuse(b / 16 * q)
        assert extra[steps] == pytest.approx(extend + (steps - 1) * sum(one.values()) + fixed, rel=1e-9)
    assert extra[1] < extra[2] < extra[3]


def test_mtps_eh_proj_is_a_bf16_linear_of_two_hidden_to_hidden():
    _, draft, spec = _costs(2)
    h = DSR1.hidden
    # one row: the whole BF16 weight read (2 h x h x 2 bytes) at the draft's BF16 GEMM constants
    k = draft.kernels.lm_gemm
    assert spec._fuse(1) == pytest.approx(k.lat + 2 * h * h * 2 / (draft.hbm_peak * k.hbm_eff), rel=0.05)
    assert spec._fuse(4096) > spec._fuse(1)


def test_a_host_sync_costs_two_kernel_issues_of_the_host():
    # H100: the session's own measurement (calibration.host.kernel_launch_us); H20: borrowed
    assert host_sync_s(H100) == pytest.approx(2e-6 * float(H100.calibration["host"]["kernel_launch_us"]))
    assert host_sync_s(H20) == pytest.approx(2e-6 * BORROWED_LAUNCH_HOST_US)
    _, _, spec = _costs(1)
    assert spec.sync == pytest.approx((HOST_SYNCS_PER_STEP + DP_HOST_SYNCS_PER_STEP) * host_sync_s(H20))
