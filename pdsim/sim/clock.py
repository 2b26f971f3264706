"""The simulation clock: SimPy's environment plus two shortcuts.

An engine step is a timeout: the instance's process yields it and SimPy wakes the process at
the step's end. When nothing else is scheduled before (or at) that end, no other process can
run, observe or change anything in between, so the clock may jump straight there and the
process go on without the round trip through the event queue (a Timeout object, a heap push
and pop, a generator resume: about a third of the cost of a decode step). The jump computes
the end exactly as the timeout would (``now + delay``) and consumes no event id, so the order
of every other event is unchanged: results are identical to stepping through SimPy.

``quiet_until`` and ``jump_to`` serve an instance that runs several such steps in a row
without touching anything outside itself (engine/instance.py ``_quiet_decode``).
"""
from __future__ import annotations

import math
from operator import attrgetter

import simpy


class Clock(simpy.Environment):
    """``horizon``: the run stops there (s); the clock never jumps past it. ``inline``: allow
    the shortcuts (False: every engine step is an event, for code that steps the environment
    by hand and looks at the world between events)."""

    def __init__(self, initial_time: float = 0.0, horizon: float = math.inf, inline: bool = True):
        super().__init__(initial_time)
        # SimPy binds ``timeout``, ``event``, ``process``... to the instance only when they are
        # in the instance's own class dict, not a base's: bind them here, or every
        # ``env.timeout`` goes through BoundClass.__get__ (a Python call and a new method object)
        for name, obj in vars(simpy.Environment).items():
            if type(obj) is simpy.core.BoundClass:
                setattr(self, name, getattr(self, name))
        self.horizon = horizon
        self.inline = inline

    #: the current simulated time (s): SimPy's property read through a C getter instead of a
    #: Python function (the world reads the clock ~20 times a request)
    now = property(attrgetter("_now"), doc="The current simulation time.")

    def skip_to(self, t: float) -> bool:
        """Advance the clock to ``t`` now, as processing a timeout that ends at ``t`` would,
        if no event is scheduled at or before ``t`` and ``t`` is within the horizon; otherwise
        leave it and return False (the caller yields a timeout instead)."""
        q = self._queue
        if not self.inline or t > self.horizon or (q and q[0][0] <= t) or t < self._now:
            return False
        self._now = t
        return True

    def quiet_until(self) -> float:
        """The time of the next scheduled event (inf when none): until then nothing else runs."""
        if not self.inline:
            return self._now  # no step ends before now: nothing runs inline
        q = self._queue
        return q[0][0] if q else math.inf

    def jump_to(self, t: float) -> None:
        """Advance the clock to ``t``, which must lie before the next scheduled event and within
        the horizon (see ``quiet_until``)."""
        if not self.skip_to(t):
            raise RuntimeError(f"clock cannot jump to {t!r}: an event is due first or it is past the horizon")
