"""Step-time dispersion: a step of one shape does not always take its price.

On the CPU validation host a pinned vLLM worker's decode steps of one batch vary by ~20% around
their mean, in phases: a slow step is followed by slow steps (lag-1 correlation ~0.7, still ~0.3
ten steps later; validation/README.md, "Step dispersion"). The price (costs/) is the mean; the
p90 ITL at light load is this spread. ``efficiency.step_cv`` (coefficient of variation of a
step's time around its price) and ``efficiency.step_cv_tau_ms`` (how long a phase lasts) are
measured with the profile (calibration/microbench/cpu_overhead.py ``dispersion``); every
bundled GPU profile leaves them 0 and its steps take their price exactly.

The factor is a stationary log-normal Ornstein-Uhlenbeck process per instance: x moves toward 0
with time constant tau over each step's own duration, the factor is exp(x - s^2/2) with
s^2 = ln(1 + cv^2), so its mean is 1 (prices keep their mean; only the spread is added) and its
coefficient of variation is cv. Idle time between steps does not move the phase (a limitation:
moved by the clock, how many steps a phase holds would depend on the phase, and the steps' mean
factor would leave 1). tau = 0 draws every step independently. Seeded per instance:
the same scenario and seed give the same steps.
"""
from __future__ import annotations

import math
import random


class StepDispersion:
    """The factor an instance's next step takes its price by (seconds stay seconds)."""

    __slots__ = ("sigma", "tau", "x", "rng")

    def __init__(self, cv: float, tau_s: float, seed: int):
        if not (0.0 <= cv < 2.0 and 0.0 <= tau_s < float("inf")):
            raise ValueError(f"step dispersion needs 0 <= cv < 2 and a finite tau >= 0 s, got cv {cv}, tau {tau_s}")
        self.sigma = math.sqrt(math.log1p(cv * cv))
        self.tau = float(tau_s)
        self.rng = random.Random(seed)
        self.x = self.rng.gauss(0.0, self.sigma)  # a stationary start: the first step is as any other

    @classmethod
    def of(cls, efficiency, seed: int) -> "StepDispersion | None":
        """The profile's dispersion, or None when it has none (every step at its price)."""
        cv = getattr(efficiency, "step_cv", 0.0)
        return cls(cv, getattr(efficiency, "step_cv_tau_ms", 0.0) * 1e-3, seed) if cv > 0 else None

    def factor(self, dt: float) -> float:
        """Advance the phase over a step priced ``dt`` seconds and return that step's factor."""
        a = math.exp(-dt / self.tau) if self.tau > 0 else 0.0
        self.x = a * self.x + self.sigma * math.sqrt(1.0 - a * a) * self.rng.gauss(0.0, 1.0)
        return math.exp(self.x - 0.5 * self.sigma * self.sigma)
