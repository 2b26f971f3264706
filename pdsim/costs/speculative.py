"""Speculative decoding (MTP / EAGLE) prices: accepted tokens per step, and the step cost of a
draft-then-verify decode step (SGLang ``--speculative-algorithm NEXTN | EAGLE``).

One decode step of a sequence:
- draft: ``num_steps`` forward passes of the draft (DeepSeek's MTP module: one decoder layer of
  the target's own shape sharing its embedding and LM head; EAGLE: a small draft model), each
  over the decoding sequences, one token each, reading their context;
- verify: one forward pass of the target over ``num_draft_tokens`` tokens per sequence: the
  GEMMs see batch x draft tokens rows, attention reads each context once but does draft-tokens
  times the FLOPs (``decode_tokens_per_seq`` of the step models);
- draft extend: after verification the draft runs once more, over the verified tokens of every
  sequence (``num_draft_tokens`` per sequence, the padded shape SGLang's CUDA graph replays),
  to write its KV and produce the hidden state the next step's first draft starts from
  (SGLang's EAGLE worker ``forward_draft_extend_after_decode``); at large batches on a
  compute-poor GPU this pass is what makes more draft tokens cost (Ant Group on H20, LMSYS
  2025-09-26: at batch 32, 675 -> 554 tok/s per GPU with more draft tokens, -18%);
- the sequence advances by 1 + the drafts accepted: with ``rates[i]`` the probability that
  position i+1 is accepted given 1..i were, P(at least j accepted) = rates[0] x ... x rates[j-1].

Prefill steps run the draft once over the new tokens too (the draft's KV), so a prefill chunk
costs target + one draft pass. Acceptance defaults: DeepSeek MTP measured on H20 by SGLang
(features.DEEPSEEK_MTP_ACCEPT).

``SpeculativeStepCost`` wraps a target and a draft StepCost and is itself a StepCost (same
interface and linearity contract as base.py), so the world can use it in place of the plain
model; the world must then advance each decoding sequence by ``1 + sample_accepted(...)``
tokens per step.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..specs.features import SpeculativeSpec
from ..specs.model import ModelSpec


def accepted_pmf(rates) -> np.ndarray:
    """P(exactly j drafts accepted), j = 0..len(rates)."""
    surv = np.cumprod([1.0] + [float(r) for r in rates])  # P(at least j accepted)
    return surv - np.append(surv[1:], 0.0)


def expected_accepted(rates) -> float:
    """Mean drafts accepted per step: sum over j of P(at least j accepted)."""
    return float(np.sum(np.cumprod([float(r) for r in rates])))


def tokens_per_step(spec: SpeculativeSpec) -> float:
    """Mean tokens a sequence advances per decode step (the accept length SGLang logs)."""
    return 1.0 + expected_accepted(spec.rates)


def sample_accepted(spec: SpeculativeSpec, rng: np.random.Generator, n: int) -> np.ndarray:
    """Drafts accepted by each of ``n`` sequences in one step (integers in 0..num_steps)."""
    return rng.choice(len(spec.rates) + 1, size=n, p=accepted_pmf(spec.rates))


def mtp_draft_model(model: ModelSpec, spec: SpeculativeSpec) -> ModelSpec:
    """The MTP module as a model: ``draft_layers`` decoder layers of the target's shape (MoE
    layers for an MoE target), sharing its vocabulary (embedding and LM head)."""
    if model.mtp_layers < spec.draft_layers and spec.method == "mtp":
        from ..specs.errors import SpecError

        raise SpecError(f"{model.name} ships {model.mtp_layers} MTP layer(s); MTP drafting needs {spec.draft_layers} "
                        "(set the model's mtp_layers from its num_nextn_predict_layers)", field="speculative.draft_layers")
    return dataclasses.replace(model, name=f"{model.name}-mtp", num_layers=spec.draft_layers,
                               num_dense_layers=0 if model.moe else None)


class SpeculativeStepCost:
    """A StepCost whose decode steps are draft (``spec.num_steps`` draft passes) + verify
    (target over ``num_draft_tokens`` tokens per sequence)."""

    def __init__(self, target, draft, spec: SpeculativeSpec):
        self.target, self.draft, self.spec = target, draft, spec
        self.name = f"{target.name}+{spec.method}"
        self.q = spec.num_draft_tokens
        self.steps = spec.num_steps

    def step_coeffs(self, prefill_tokens: int, prefill_seqs: int, decode_batch: int, *,
                    rank_tokens: float | None = None) -> tuple[float, float, float]:
        """(c0, c_attn, c_ctx) of one step (base.py); ``rank_tokens`` is the busiest DP rank's
        verify tokens (decode sequences x num_draft_tokens + prefill tokens)."""
        t0, ta, tc = self.target.step_coeffs(prefill_tokens, prefill_seqs, decode_batch, rank_tokens=rank_tokens,
                                             decode_tokens_per_seq=self.q if decode_batch else 1)
        d_rank = None if rank_tokens is None else rank_tokens / self.q
        d0, da, dc = self.draft.step_coeffs(prefill_tokens, prefill_seqs, 0) if prefill_tokens else (0.0, 0.0, 0.0)
        if decode_batch:
            s0, _, sc = self.draft.step_coeffs(0, 0, decode_batch, rank_tokens=d_rank)
            d0 += self.steps * s0
            dc += self.steps * sc
            # draft extend after verification: the draft runs over the verified tokens of every
            # sequence (its KV and hidden state for the next draft), padded to num_draft_tokens
            e0, _, ec = self.draft.step_coeffs(0, 0, decode_batch, rank_tokens=rank_tokens, decode_tokens_per_seq=self.q)
            d0 += e0
            dc += ec
        return t0 + d0, ta + da, tc + dc

    def step_time(self, prefill_tokens: int, prefill_attn: float, prefill_seqs: int, decode_batch: int,
                  decode_ctx: float, *, rank_tokens: float | None = None) -> float:
        c0, ca, cc = self.step_coeffs(prefill_tokens, prefill_seqs, decode_batch, rank_tokens=rank_tokens)
        return c0 + ca * prefill_attn + cc * decode_ctx

    def breakdown(self, prefill_tokens: int, prefill_attn: float, prefill_seqs: int, decode_batch: int,
                  decode_ctx: float, *, rank_tokens: float | None = None) -> dict[str, float]:
        """Seconds per component: the target's verify parts, plus ``draft`` for the draft passes."""
        out = self.target.breakdown(prefill_tokens, prefill_attn, prefill_seqs, decode_batch, decode_ctx,
                                    rank_tokens=rank_tokens, decode_tokens_per_seq=self.q if decode_batch else 1)
        total = self.step_time(prefill_tokens, prefill_attn, prefill_seqs, decode_batch, decode_ctx, rank_tokens=rank_tokens)
        out["draft"] = total - sum(out.values())
        return out
