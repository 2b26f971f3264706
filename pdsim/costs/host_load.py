"""Processor sharing with other work on the host: a measured stretch of the engine's CPU work.

When other processes share the cores an engine runs on, the kernel gives each runnable process a
share of a core, and the engine's CPU work takes ``stretch`` times as long as on the quiet host
its profile was measured on (specs/host.py says how to measure it: the same steps timed under the
other load and without it). A what-if and a correction for a recording made on a loaded host; 1
(nothing changes) unless a scenario sets it.

Why it matters near a knee (CPU validation host, 2026-11-26, vLLM 0.32, 60 requests at 0.715
req/s, cpu-vllm-here-trace-knee): stretching every step by 1.02 / 1.05 / 1.10 / 1.15 moves the
simulated p90 ITL from 33 ms to 36 / 40 / 53 / 62 ms and the mean from 37 to 40 / 45 / 55 / 67 ms:
longer steps keep more requests decoding at once, so each step carries more decodes and the ITL
tail grows 4-6x faster than the step cost.

Where the stretch applies:
- device = the host's CPU (``gpu.arch: cpu``): the whole step (kernels, and the host work around
  them, run on the shared cores): ``StretchedStepCost`` multiplies the step's price;
- a GPU: only the per-step host work (``host_constants``); the kernels run on the GPU.
"""
from __future__ import annotations

import dataclasses


def stretch_of(scenario) -> float:
    """The scenario's measured host stretch (1 when it gives none)."""
    host = getattr(scenario, "host", None)
    return host.cpu_stretch if host is not None else 1.0


class StretchedStepCost:
    """A step cost whose every step takes ``stretch`` times its inner cost's price (seconds). The
    linearity contract (costs/base.py) holds: the triple is the inner triple times ``stretch``, and
    ``step_time`` is computed from that triple as the contract says."""

    def __init__(self, inner, stretch: float):
        self.inner, self.stretch = inner, float(stretch)
        self.name = getattr(inner, "name", "cost")
        self.linear = getattr(inner, "linear", True)

    def __getattr__(self, attr):  # everything else (memory, attributes the world reads) as the inner cost's
        return getattr(self.inner, attr)

    def step_coeffs(self, prefill_tokens, prefill_seqs, decode_batch, **kw):
        c0, ca, cc = self.inner.step_coeffs(prefill_tokens, prefill_seqs, decode_batch, **kw)
        s = self.stretch
        return c0 * s, ca * s, cc * s

    def step_time(self, prefill_tokens, prefill_attn, prefill_seqs, decode_batch, decode_ctx, **kw):
        if not self.linear:
            return self.stretch * self.inner.step_time(prefill_tokens, prefill_attn, prefill_seqs, decode_batch,
                                                       decode_ctx, **kw)
        c0, ca, cc = self.step_coeffs(prefill_tokens, prefill_seqs, decode_batch, **kw)
        return c0 + ca * prefill_attn + cc * decode_ctx

    def breakdown(self, *a, **kw) -> dict[str, float]:
        return {k: v * self.stretch for k, v in self.inner.breakdown(*a, **kw).items()}


def stretched(cost, hw, scenario):
    """``cost`` of a group on profile ``hw`` under the scenario's host stretch: the whole step
    on a CPU device, unchanged on a GPU (its host work is scaled by ``host_constants``)."""
    s = stretch_of(scenario)
    if s == 1.0 or hw.gpu.arch != "cpu":
        return cost
    return StretchedStepCost(cost, s)


def host_constants(hw, scenario, factor: float = 1.0):
    """``hw`` with its per-step host constants scaled by ``factor`` x the host stretch on a GPU
    profile (by ``factor`` only on a CPU device, whose whole step ``stretched`` scales)."""
    f = factor * (stretch_of(scenario) if hw.gpu.arch != "cpu" else 1.0)
    if f == 1.0:
        return hw
    e = hw.efficiency
    return dataclasses.replace(hw, efficiency=dataclasses.replace(
        e, step_overhead_us=e.step_overhead_us * f, seq_overhead_us=e.seq_overhead_us * f,
        ctx_overhead_ns=e.ctx_overhead_ns * f, prefill_token_ns=e.prefill_token_ns * f))
