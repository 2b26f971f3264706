"""What the step prices say about a group: full-batch prefill capacity, decode step time at a
batch size, the largest decode batch within a TPOT bound, and whether a decode step is
bound by HBM bandwidth or by compute.

All of it asks the scenario's own step-cost model (``pdsim.costs.build_step_cost``, as the
world builds it) for one step shape; the compute/HBM split prices the same step on the same
hardware with twice the HBM bandwidth and with twice the FLOP/s, and says which halves the
step more. Shapes follow pdsim.costs.base: ``prefill_attn`` is the causal token-pair count
(tokens x mean context over a chunk; a prompt of length L averages L/2 pairs per token, so a
batch of mixed prompts averages sum(L^2) / (2 sum(L)) per token), ``decode_ctx`` the batch's
summed context.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass


def group_spec(resolved, role: str, index: int):
    return getattr(resolved.scenario.cluster, role)[index]


def step_cost(resolved, role: str, index: int, hw=None):
    """The step-cost model of one group, as pdsim/sim/build.py builds it (``hw``: a what-if)."""
    from ..costs import build_step_cost

    sc = resolved.scenario
    return build_step_cost(sc.cost_model, hw or resolved.hardware, resolved.model, group_spec(resolved, role, index),
                           role, nic_gbit=sc.transfer.nic_gbit)


@dataclass(frozen=True)
class PrefillCapacity:
    batch_tokens: int  # prompt tokens in one full prefill step (per-rank budget x dp)
    step_s: float
    tokens_per_s: float  # one instance, full steps


def prefill_capacity(resolved, role: str, index: int, mean_prompt: float, eff_prompt: float) -> PrefillCapacity:
    """Prompt tokens/s one instance prefills when every step is full (every DP rank at its
    budget, prompts of the run's length mix): the most its prefill can serve."""
    g = group_spec(resolved, role, index)
    batch = g.engine.prefill_budget(g.dp) * g.dp
    seqs = max(1, round(batch / max(mean_prompt, 1.0)))
    t = step_cost(resolved, role, index).step_time(batch, batch * max(eff_prompt, 1.0) / 2.0, seqs, 0, 0)
    return PrefillCapacity(batch, t, batch / t if t > 0 else float("inf"))


def decode_step_s(resolved, role: str, index: int, batch: int, mean_ctx: float, cost=None) -> float:
    """Seconds of a pure decode step of ``batch`` sequences of ``mean_ctx`` context each."""
    cost = cost or step_cost(resolved, role, index)
    return cost.step_time(0, 0.0, 0, batch, batch * mean_ctx) if batch > 0 else 0.0


def max_batch_within(resolved, role: str, index: int, mean_ctx: float, bound_s: float, upper: int) -> int:
    """The largest decode batch (<= ``upper``) whose step stays within ``bound_s`` (0: none).
    Step time is monotone in the batch (pdsim.costs.base), so bisection finds it."""
    cost = step_cost(resolved, role, index)
    lo, hi = 0, max(int(upper), 0)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if decode_step_s(resolved, role, index, mid, mean_ctx, cost) <= bound_s:
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclass(frozen=True)
class StepBound:
    step_s: float
    hbm_gain: float  # share of the step saved by twice the HBM bandwidth
    compute_gain: float  # share saved by twice the FLOP/s
    parts: dict[str, float]  # seconds per component (pdsim.costs PARTS)

    @property
    def kind(self) -> str:
        """``memory`` or ``compute`` when one clearly dominates, else ``mixed`` (overheads,
        communication or both resources)."""
        if self.hbm_gain >= 2 * self.compute_gain and self.hbm_gain >= 0.1:
            return "memory"
        if self.compute_gain >= 2 * self.hbm_gain and self.compute_gain >= 0.1:
            return "compute"
        return "mixed"


def decode_bound(resolved, role: str, index: int, batch: int, mean_ctx: float) -> StepBound:
    """Price a decode step three times: as is, with 2x HBM bandwidth, with 2x FLOP/s."""
    hw = resolved.hardware
    gpu = hw.gpu
    hbm2 = dataclasses.replace(hw, gpu=dataclasses.replace(gpu, hbm_gbps=gpu.hbm_gbps * 2))
    flops2 = dataclasses.replace(hw, gpu=dataclasses.replace(gpu, bf16_tflops=gpu.bf16_tflops * 2,
                                                             fp8_tflops=gpu.fp8_tflops * 2,
                                                             attn_tflops=gpu.attn_tflops * 2))
    cost = step_cost(resolved, role, index)
    t = decode_step_s(resolved, role, index, batch, mean_ctx, cost)
    t_hbm = decode_step_s(resolved, role, index, batch, mean_ctx, step_cost(resolved, role, index, hbm2))
    t_fl = decode_step_s(resolved, role, index, batch, mean_ctx, step_cost(resolved, role, index, flops2))
    parts = cost.breakdown(0, 0.0, 0, batch, batch * mean_ctx)
    return StepBound(t, (t - t_hbm) / t if t > 0 else 0.0, (t - t_fl) / t if t > 0 else 0.0, parts)
