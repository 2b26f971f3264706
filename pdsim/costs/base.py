"""The interface between prices and the world: one step-time function per instance.

The world calls ``step_time`` once per engine iteration with aggregate shapes only, so a
calibrated model can replace the roofline without touching the world:

- ``prefill_tokens``: new tokens prefilled in this step (all sequences, whole instance)
- ``prefill_attn``: causal attention token pairs, sum over prefilling sequences of new x (prior
  context + new / 2). Under DP attention the slowest rank sets the step: pass dp x the busiest
  rank's pairs (the instance total when ranks are balanced)
- ``prefill_seqs``: sequences with a prefill chunk in the step
- ``decode_batch``: sequences decoding in the step (one token each, or ``decode_tokens_per_seq``)
- ``decode_ctx``: sum of those sequences' context lengths (tokens); under DP attention dp x the
  busiest rank's sum, as for ``prefill_attn``

Keyword arguments (defaults reproduce the plain step):

- ``rank_tokens``: tokens (prefill + decode x tokens per sequence) on the busiest DP rank; the
  per-rank GEMMs and the DeepEP dispatch of that rank run at this size and every other rank
  pads to it (DP attention steps all ranks together). Default: an even split, total / dp.
- ``decode_tokens_per_seq``: query tokens per decoding sequence: 1, or the draft tokens a
  speculative verify step checks (SGLang ``--speculative-num-draft-tokens``).

Linearity contract (the world may memoise per batch shape): for fixed (prefill_tokens,
prefill_seqs, decode_batch, keywords), the step is exactly linear in ``prefill_attn`` and
``decode_ctx``. ``step_coeffs(prefill_tokens, prefill_seqs, decode_batch, **keywords)`` returns
``(c0, c_attn, c_ctx)`` and ``step_time`` is *computed as* ``c0 + c_attn * prefill_attn +
c_ctx * decode_ctx`` from those same three floats, in that order, so a memoised triple gives
bit-identical times. ``breakdown`` returns seconds per component; they sum to ``step_time``
(up to float rounding).

A cost whose ``linear`` attribute is False gives no such guarantee and the world prices each
of its steps (costs/pipeline.py's round; decode under two-batch overlap, whose hiding depends
on the step's attention, costs/tbo.py): its triple then prices the step at the least attention
work (an upper bound on its ``step_time``).

Returns seconds. Implementations must be monotone non-decreasing in every positional argument.
"""
from __future__ import annotations

from typing import Protocol


class StepCost(Protocol):
    name: str

    def step_coeffs(self, prefill_tokens: int, prefill_seqs: int, decode_batch: int, *,
                    rank_tokens: float | None = None, decode_tokens_per_seq: int = 1) -> tuple[float, float, float]: ...

    def step_time(self, prefill_tokens: int, prefill_attn: float, prefill_seqs: int,
                  decode_batch: int, decode_ctx: float, *, rank_tokens: float | None = None,
                  decode_tokens_per_seq: int = 1) -> float: ...

    def breakdown(self, prefill_tokens: int, prefill_attn: float, prefill_seqs: int,
                  decode_batch: int, decode_ctx: float, *, rank_tokens: float | None = None,
                  decode_tokens_per_seq: int = 1) -> dict[str, float]: ...
