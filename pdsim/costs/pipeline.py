"""Pipeline parallelism prices (SGLang ``--pp-size``): per-stage step costs and the activation
hand-off between stages.

The model's layers split into ``pp`` stages (as evenly as possible; DeepSeek's leading dense
layers fall in the first stage, as they come first); each stage is an instance-shaped TP/EP
group of its own GPUs running its layers, the LM head on the last stage only, the per-step CPU
overhead once (first stage). Between stages each micro-batch's hidden states move to the next
stage: tokens x hidden x 2 bytes over NVLink when the boundary is inside a node, else over the
sending GPUs' NIC shares, plus one point-to-point latency.

With ``in_flight`` micro-batches (PipelineSpec), a new micro-batch can enter every
``max(stage times)`` seconds (the pipeline's step, what bounds throughput), and one takes
``sum(stage times) + (pp - 1) x hand-off`` from entering to leaving (its latency). The world
should start a step every ``PipelineStepCost.step_time`` seconds and deliver that step's tokens
``latency - step_time`` later (see the issue-12 report).
"""
from __future__ import annotations

import dataclasses

from ..specs.features import PipelineSpec
from ..specs.hardware import HardwareProfile
from ..specs.model import ModelSpec, stage_layers, stage_model  # noqa: F401 - re-exported
from .registry import build_step_cost


def handoff_s(tokens: float, hidden: int, hw: HardwareProfile, same_node: bool, senders: int = 1) -> float:
    """Seconds to send ``tokens`` hidden states (BF16) to the next stage."""
    nbytes = tokens * hidden * 2.0
    if same_node:
        bw = senders * hw.gpu.peer_bytes_per_s * hw.efficiency.nvlink
    else:
        bw = senders * hw.nic_bytes_per_gpu * hw.efficiency.nic
    return hw.efficiency.p2p_latency_us * 1e-6 + nbytes / bw


class PipelineStepCost:
    """Step costs of a ``pp``-stage pipeline; each stage is ``group`` (its TP/EP world)."""

    def __init__(self, kind: str, hw: HardwareProfile, model: ModelSpec, group, role: str, spec: PipelineSpec, **features):
        self.spec, self.hw, self.model = spec, hw, model
        pp = spec.pp_size
        if pp > model.num_layers:
            from ..specs.errors import SpecError

            raise SpecError(f"pp_size {pp} exceeds the model's {model.num_layers} layers", field="pipeline.pp_size")
        self.stages = [build_step_cost(kind, hw, stage_model(model, pp, i), group, role, lm_head=(i == pp - 1),
                                       with_overhead=(i == 0), **features) for i in range(pp)]
        gpus = group.gpus_per_instance(hw.gpus_per_node)
        # consecutive stages share a node when a stage is a fraction of one
        self.same_node = gpus < hw.gpus_per_node
        self.senders = min(gpus, hw.gpus_per_node)
        self.name = f"{self.stages[0].name}-pp{pp}"

    def stage_times(self, *args, **kw) -> list[float]:
        return [s.step_time(*args, **kw) for s in self.stages]

    def step_time(self, prefill_tokens, prefill_attn, prefill_seqs, decode_batch, decode_ctx, **kw) -> float:
        """Seconds between micro-batches entering the pipeline: the slowest stage."""
        return max(self.stage_times(prefill_tokens, prefill_attn, prefill_seqs, decode_batch, decode_ctx, **kw))

    def latency(self, prefill_tokens, prefill_attn, prefill_seqs, decode_batch, decode_ctx, **kw) -> float:
        """Seconds from a micro-batch entering the first stage to its tokens leaving the last."""
        q = kw.get("decode_tokens_per_seq", 1)
        tokens = prefill_tokens + decode_batch * q
        hops = (self.spec.pp_size - 1) * handoff_s(tokens, self.model.hidden, self.hw, self.same_node, self.senders)
        return sum(self.stage_times(prefill_tokens, prefill_attn, prefill_seqs, decode_batch, decode_ctx, **kw)) + hops


class PipelineRound:
    """The engine step of a pipelined instance as the world runs it: one round in which every
    running sequence advances one token (a prefill chunk, its chunk).

    The batch splits into ``m`` micro-batches (``PipelineSpec.in_flight``); in steady state the
    slowest stage serves the m micro-batches one after another, and a micro-batch cannot start
    its next token before its previous one has left the last stage, so a round takes

        max(m x max_i stage_i(B / m),  sum_i stage_i(B / m) + (pp - 1) x hand-off)

    seconds (the first term bounds throughput, the second latency). Not linear in the context
    arguments (a max): the world does not memoise it (``linear = False``)."""

    linear = False

    def __init__(self, pipe: PipelineStepCost):
        self.pipe = pipe
        self.m = float(pipe.spec.in_flight)
        self.name = pipe.name

    def step_time(self, prefill_tokens, prefill_attn, prefill_seqs, decode_batch, decode_ctx, **kw) -> float:
        m = self.m
        args = (prefill_tokens / m, prefill_attn / m, prefill_seqs / m, decode_batch / m, decode_ctx / m)
        if "rank_tokens" in kw and kw["rank_tokens"] is not None:
            kw = dict(kw, rank_tokens=kw["rank_tokens"] / m)
        stages = self.pipe.stage_times(*args, **kw)
        tokens = args[0] + args[3] * kw.get("decode_tokens_per_seq", 1)
        p = self.pipe
        hops = (p.spec.pp_size - 1) * handoff_s(tokens, p.model.hidden, p.hw, p.same_node, p.senders)
        through = m * max(stages)
        latency = sum(stages) + hops
        return through if through > latency else latency

    def breakdown(self, *args, **kw) -> dict[str, float]:
        return {"pipeline_round": self.step_time(*args, **kw)}
