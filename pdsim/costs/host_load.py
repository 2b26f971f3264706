"""Processor sharing with other work on the host: a measured stretch of the engine's CPU work.

When other processes share the cores an engine runs on, the kernel gives each runnable process
a share of a core, and the engine's CPU work takes ``stretch`` times as long as on a core of its
own; ``stretch = (run + run-queue wait) / run`` of the model worker over the run (the kernel's
``/proc/<pid>/schedstat``), relative to the same figure while the profile was measured
(specs/host.py). Measured on the CPU validation host (2026-11-26, vLLM 0.32, knee load, 60
requests, steps traced): with two busy loops of another session on its 2 cores the worker's
stretch was 1.19 and every part of the step stretched by about that (a pure-decode step's
worker p90 23 -> 26 ms, a chunked prefill's mean 437 -> 464 ms), and near the knee the longer
steps kept more requests decoding at once (4.5 -> 4.8 per step), which is where the ITL tail grows.

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
        ctx_overhead_ns=e.ctx_overhead_ns * f))
