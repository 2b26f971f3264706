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

The world's own events cost fewer Python calls: ``call_later`` queues a callback's timeout in
one call (SimPy's ``Timeout`` constructor and ``schedule`` are two), and ``run_until`` processes
the due events in one frame (SimPy's ``peek`` and ``step`` are a call each per event). Both keep
SimPy's queue entries and its order exactly: same times, priorities and event ids.
"""
from __future__ import annotations

import math
from heapq import heappop, heappush
from operator import attrgetter

import simpy
from simpy.core import StopSimulation
from simpy.events import NORMAL, URGENT, Timeout

_new_event = object.__new__


def call_later(env: simpy.Environment, delay: float, fn) -> Timeout:
    """``env.timeout(delay).callbacks.append(fn)`` in one Python call, for any SimPy
    environment: the same Timeout, queued at ``now + delay`` with the same priority and the
    next event id, so every event keeps its place in the order."""
    if delay < 0:
        raise ValueError(f"Negative delay {delay}")
    ev = _new_event(Timeout)
    ev.env = env
    ev.callbacks = [fn]
    ev._value = None
    ev._delay = delay
    ev._ok = True
    heappush(env._queue, (env._now + delay, NORMAL, next(env._eid), ev))
    return ev


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

    def run_until(self, target: float) -> None:
        """Process every event due at or before ``target``, in queue order: what
        ``while peek() <= target: step()`` does, in one frame. A ``StopSimulation`` raised by a
        callback leaves the event's later callbacks queued first, as ``step`` does."""
        q = self._queue
        while q and q[0][0] <= target:
            self._now, _, _, event = heappop(q)
            callbacks, event.callbacks = event.callbacks, None
            try:
                for callback in callbacks:
                    callback(event)
            except StopSimulation:
                event.callbacks = callbacks[callbacks.index(callback) + 1:]
                heappush(q, (self._now, URGENT - 1, next(self._eid), event))  # ahead of all else
                raise
            if not event._ok and not hasattr(event, "_defused"):
                exc = type(event._value)(*event._value.args)  # a failed event nobody handled
                exc.__cause__ = event._value
                raise exc

    def jump_to(self, t: float) -> None:
        """Advance the clock to ``t``, which must lie before the next scheduled event and within
        the horizon (see ``quiet_until``)."""
        if not self.skip_to(t):
            raise RuntimeError(f"clock cannot jump to {t!r}: an event is due first or it is past the horizon")
