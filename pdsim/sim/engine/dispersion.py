"""Step-time dispersion: a step of one shape does not always take its price.

On the CPU validation host a pinned vLLM worker's decode steps of one batch vary by ~20% around
their mean, in phases: a slow step is followed by slow steps (lag-1 correlation ~0.7, still ~0.3
ten steps later; validation/README.md, "Step dispersion"). The price (costs/) is the mean; the
p90 ITL at light load is this spread. ``efficiency.step_cv`` (coefficient of variation of a
step's time around its price) and ``efficiency.step_cv_tau_ms`` (how long a phase lasts) are
measured with the profile (calibration/microbench/cpu_overhead.py ``dispersion``); every
bundled GPU profile leaves them 0 and its steps take their price exactly.

The phase is a stationary Ornstein-Uhlenbeck process x per instance (variance s^2 = ln(1 + cv^2),
time constant tau) that runs on the steps' own time. A step lasting T takes the phase's average
over those T seconds: exp(xbar - v/2), with v = s^2 g(T/tau) the variance of that average and
g(u) = 2 (u - 1 + e^-u) / u^2, so every step's factor has mean 1 (prices keep their mean; only the
spread is added). A step much shorter than tau (g -> 1) takes the instantaneous factor, CV cv; a
step much longer averages the phases it spans (CV ~ cv sqrt(2 tau / T)): on the validation host a
512-token prefill step of ~0.5 s spans ~20 phases of ~25 ms, and its real worker time varied
by a few percent while batch-1 decode steps varied by 16%. The step's end phase and its average are
drawn jointly (both Gaussian given the start), so the next step starts where this one ended.
Idle time between steps does not move the phase (a limitation: moved by the clock, how many
steps a phase holds would depend on the phase, and the steps' mean factor would leave 1).
tau = 0 draws every step's factor independently, whatever its length. Seeded per instance: the
same scenario and seed give the same steps. ``cv`` is the instantaneous spread: a profile's
measured spread of finite steps is converted by ``instant_cv``.
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
        """Advance the phase over a step priced ``dt`` seconds and return that step's factor (the
        phase's average over the step)."""
        s2 = self.sigma * self.sigma
        if s2 == 0.0:  # no spread: every step at its price
            return 1.0
        gauss = self.rng.gauss
        if self.tau <= 0.0:  # independent steps
            self.x = self.sigma * gauss(0.0, 1.0)
            return math.exp(self.x - 0.5 * s2)
        u = dt / self.tau
        if u > 1e9:  # (tau ~ 0 against the step) the step averages independent phases: no spread left
            self.x = self.sigma * gauss(0.0, 1.0)
            return 1.0
        if u < 1e-4:  # the step sees one phase: its factor is the instantaneous one
            a = math.exp(-u)
            self.x = a * self.x + self.sigma * math.sqrt(max(0.0, 1.0 - a * a)) * gauss(0.0, 1.0)
            return math.exp(self.x - 0.5 * s2)
        a = math.exp(-u)
        x0 = self.x
        # given x0, the end phase x1 and the step's average m are jointly Gaussian (OU with
        # stationary variance s2): var x1 = s2 (1 - a^2); var m = 2 s2 (u - 2 (1 - a) + (1 - a^2) / 2) / u^2;
        # cov = s2 (1 - a)^2 / u; means a x0 and x0 (1 - a) / u
        var_x = s2 * (1.0 - a * a)
        var_m = 2.0 * s2 * (u - 2.0 * (1.0 - a) + 0.5 * (1.0 - a * a)) / (u * u)
        cov = s2 * (1.0 - a) ** 2 / u
        z1 = gauss(0.0, 1.0)
        sx = math.sqrt(var_x)
        self.x = a * x0 + sx * z1
        rest = max(0.0, var_m - cov * cov / var_x)
        m = x0 * (1.0 - a) / u + cov / sx * z1 + math.sqrt(rest) * gauss(0.0, 1.0)
        return math.exp(m - 0.5 * s2 * window_share(u))


def window_share(u: float) -> float:
    """Variance of a stationary OU process's average over a window ``u`` time constants long,
    as a share of the process's own variance: 2 (u - 1 + e^-u) / u^2 (1 at u -> 0)."""
    if u < 1e-4:
        return 1.0 - u / 3.0
    if u > 1e9:
        return 2.0 / u
    return 2.0 * (u - 1.0 + math.exp(-u)) / (u * u)


def instant_cv(cv_within: float, cv_between: float, step_s: float, tau_s: float) -> float:
    """The instantaneous spread (``efficiency.step_cv``) behind a measured one: steps of mean
    length ``step_s`` varied by ``cv_within`` around their run's mean (a phase average over each
    step, so less than the instantaneous spread) and runs by ``cv_between`` around each other
    (phases longer than one run, kept as they are)."""
    s2 = math.log1p(cv_within * cv_within)
    if tau_s > 0 and step_s > 0:
        s2 /= window_share(step_s / tau_s)
    return math.sqrt(math.expm1(s2) + cv_between * cv_between)
