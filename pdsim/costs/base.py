"""The interface between prices and the world: one step-time function per instance.

The world calls ``step_time`` once per engine iteration with aggregate shapes only, so a
calibrated model can replace the roofline without touching the world:

- ``prefill_tokens``: new tokens prefilled in this step (all sequences, whole instance)
- ``prefill_attn``: sum over prefilling sequences of new x (prior context + new/2), the
  causal attention pair count (token pairs), whole instance
- ``prefill_seqs``: sequences with a prefill chunk in the step
- ``decode_batch``: sequences decoding one token each
- ``decode_ctx``: sum of those sequences' context lengths (tokens)

Returns seconds. Implementations must be monotone non-decreasing in every argument.
"""
from __future__ import annotations

from typing import Protocol


class StepCost(Protocol):
    name: str

    def step_time(self, prefill_tokens: int, prefill_attn: float, prefill_seqs: int,
                  decode_batch: int, decode_ctx: float) -> float: ...

    def breakdown(self, prefill_tokens: int, prefill_attn: float, prefill_seqs: int,
                  decode_batch: int, decode_ctx: float) -> dict[str, float]: ...
