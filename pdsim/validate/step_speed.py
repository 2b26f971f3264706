"""How far a validation metric moves when every engine step is a few % off its price.

Near a knee a small error in the step prices is amplified: longer steps keep more requests in the
engine at once, so each step carries more work and the queue grows. On the CPU validation host the
engine's own speed drifted by that much within and between recordings, fitted on nothing:

- zen1c, cpu-vllm-zen1c-prefix-knee (step trace ``validation/cpu-vllm-calibration/zen1c/step-traces``,
  ``validation/cpu-vllm/step_compare.py --case``): each real step's time over its price, median by
  thirds of the recording, 0.96 / 0.98 / 0.99 for steps with prefill and 0.91 / 0.94 / 1.05 for pure
  decode steps, minutes after the profile was measured on the same server;
- zen1, the same host the same day: decode steps 0.82x their price at 11:20 and 0.95x at 11:38
  (step_compare.py's docstring); the re-measured step overhead 5,501 / 4,491 / 4,935 us in the
  morning, afternoon and evening (zen1, zen1b, zen1c ``overhead.json``).

So ``pdsim validate --step-speed 5`` simulates each run twice more, with every step's price 5%
lower and 5% higher (``ResolvedScenario.price_scale``: the step cost of every group times that,
prices of transfers and host hops unchanged), and reports per metric the simulated range and its
elasticity (relative change of the metric per relative change of the step price). A failing metric
whose tolerance window the range reaches is marked: it would pass were the host that much faster or
slower than when its profile was measured. It still counts as failing. This is a probe, not a fit:
no constant is changed by it, and which end would pass differs from metric to metric.
"""
from __future__ import annotations

import dataclasses

from .compare import Row, number

#: the widest band the probe takes: past it the question is no longer a drift of the host
MAX_FRAC = 0.5


def check_frac(frac: float) -> float:
    """``frac`` (a fraction, 0.05 = 5%) as the probe takes it; ValueError past (0, MAX_FRAC]."""
    if not 0.0 < frac <= MAX_FRAC:
        raise ValueError(f"expected a step-speed band in (0, {MAX_FRAC * 100:g}] %, got {frac * 100:g} %")
    return frac


def with_step_band(rows: list[Row], real_record, scenario, frac: float, arrivals: str = "auto",
                   max_concurrency: int | None = None) -> list[Row]:
    """``rows`` with ``step_fast`` / ``step_slow`` filled: the run's requests simulated again
    (``align.simulate_aligned``) with every step's price times ``1 - frac`` and ``1 + frac``."""
    from .align import simulate_aligned

    check_frac(frac)
    ends = []
    for scale in (1.0 - frac, 1.0 + frac):
        sc = dataclasses.replace(scenario, price_scale=scenario.price_scale * scale)
        ends.append(simulate_aligned(real_record, sc, arrivals, max_concurrency).sim.summary())
    fast, slow = ends
    return [dataclasses.replace(r, step_fast=number(fast.get(r.metric)),
                                step_slow=number(slow.get(r.metric)))
            for r in rows]

