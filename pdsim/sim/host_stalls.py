"""Other work visiting a placed worker's core: whole processes for a while, not a steady fraction.

sim/host_cores.py spreads the host's other load (``host.background``, and the unpinned processes of
stepping instances) over the cores by water filling, giving each core a mean number of extra busy
processes ``m``. Taken as a constant, a fractional ``m`` slows every step on that core by the same
1/(k + m). The kernel does not share a core that way: a runnable process sits on one CPU, and a
worker meeting it runs at 1/(k + 1) (equal weights; with autogroups, one per session) until it
leaves. So each core here holds ``floor(m)`` extra processes throughout, plus one visitor for a
fraction ``frac(m)`` of the time: a two-state Markov chain whose visits last ``visit_s`` on average
(exponential), arrivals at the rate that keeps the mean load ``m``. A step much shorter than a visit
runs either at full share or at 1/(k + 1) of it for most of its length: the stalls of roughly twice
a step's time that a mean share never gives.

What sets ``visit_s``: a process stays on the busy CPU it landed on until it blocks or the
periodic load balance moves it; a busy CPU balances every ``balance_interval`` x ``busy_factor``
(Linux kernel/sched/topology.c ``sd_init``: balance_interval = the domain's CPU count in ms,
busy_factor = 16; up to 2x after failed balances), ``busy_balance_ms(cores)``: 32 ms on a 2-CPU
host. Measured on the CPU validation host (docs/validation/host-stalls.md, vLLM step traces of
2026-11-26): decode steps whose worker call ran > 1.3x its batch size's median come in runs of
consecutive steps whose stalled time adds up to 26-36 ms on average in six recordings, and a stalled
step's excess is ~1x its own median length (one visitor, equal weight).

While a core has no step running nothing observes it, so no events are made: when a step starts on
it again, its visitor is drawn from the chain's exact transition over the idle time (with the mean
load of the moment it went idle). Seeded: the same scenario seed gives the same visits.
"""
from __future__ import annotations

import math

import numpy as np

BUSY_FACTOR = 16  # kernel/sched/topology.c sd_init: .busy_factor (balance this much less often when busy)


def busy_balance_ms(cores: int) -> float:
    """Mean period (ms) of the kernel's periodic load balance of a busy CPU in a one-level domain of
    ``cores`` CPUs: balance_interval (= cores ms, ``sd_init``) x busy_factor (16)."""
    if cores < 1:
        raise ValueError(f"cores must be >= 1, got {cores}")
    return float(cores * BUSY_FACTOR)


class Visits:
    """Which core has a visitor now, and when that changes next (seconds of simulated time)."""

    def __init__(self, cores: int, visit_s: float, seed: int):
        if not (visit_s > 0 and math.isfinite(visit_s)):
            raise ValueError(f"visit_s must be > 0 and finite, got {visit_s}")
        self.visit_s = float(visit_s)
        self.rng = np.random.default_rng([int(seed), 0x5157])  # its own stream: the world's draws stay as they were
        self.present = [0] * cores  # 1 while a visitor is on the core
        self.rate = [0.0] * cores  # rate (1/s) of the core's next change, as last drawn; -1: draw again
        self.flip_at = [math.inf] * cores
        self.idle_since: list[float | None] = [0.0] * cores  # no step running on it since then
        self.idle_frac = [0.0] * cores  # frac(mean load) when it went idle

    def extra(self, mean: list[float]) -> list[float]:
        """The extra busy processes on each core now, from the mean ones (water filling)."""
        return [math.floor(m) + p for m, p in zip(mean, self.present)]

    def _rate(self, c: int, frac: float) -> float:
        if self.present[c]:
            return 1.0 / self.visit_s  # the visit ends
        return frac / ((1.0 - frac) * self.visit_s)  # one arrives: mean present time = frac

    def wake(self, c: int, now: float) -> None:
        """A step starts on core ``c`` after none ran there: draw its visitor over the idle time."""
        since = self.idle_since[c]
        self.idle_since[c] = None
        if since is None or now <= since:
            return
        f = self.idle_frac[c]
        p = f + (self.present[c] - f) * math.exp(-(now - since) / ((1.0 - f) * self.visit_s))
        self.present[c] = int(self.rng.random() < p)
        self.rate[c] = -1.0

    def sleep(self, c: int, now: float, mean: float) -> None:
        """No step runs on core ``c`` from ``now``."""
        if self.idle_since[c] is None:
            self.idle_since[c] = now
            self.idle_frac[c] = mean - math.floor(mean)
            self.flip_at[c] = math.inf
            self.rate[c] = -1.0

    def next_change(self, now: float, mean: list[float], running: list[bool]) -> tuple[float, int]:
        """(time, core) of the next visitor to come or go on a core with a step running; rates that
        changed since the last draw are drawn again (exponential: memoryless, so this is exact)."""
        best, core = math.inf, -1
        for c, m in enumerate(mean):
            if not running[c]:
                continue
            r = self._rate(c, m - math.floor(m))
            if r != self.rate[c]:
                self.rate[c] = r
                self.flip_at[c] = now + self.rng.exponential(1.0 / r) if r > 0 else math.inf
            if self.flip_at[c] < best:
                best, core = self.flip_at[c], c
        return best, core

    def flip(self, c: int) -> None:
        self.present[c] ^= 1
        self.rate[c] = -1.0  # draw the next change from the new state
