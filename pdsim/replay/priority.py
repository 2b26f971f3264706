"""The replay client's scheduling priority while it sends and reads (``ReplayConfig.fifo``).

On a small host the client shares its core with the engine's unpinned processes (an engine core
polling for its worker's output, the API server). At equal priority it waits its turn and then
reads several steps' tokens at once, stamping them with one time: 12-16% of the inter-token
gaps of the CPU validation runs were 0 s, all of them the client's (validation/README.md, "The
client's timestamps"). At SCHED_FIFO it runs the moment a token arrives; it needs little CPU
(~4% of a core there), so the engine loses next to nothing.

Only the send/receive loop runs at that priority (``fifo``): a whole process under ``chrt -f``
also runs its numpy work there, and BLAS worker threads spinning at one real-time priority on the
client's one core can hold each other off for minutes (seen here: a run summary that took 1.5 min).
"""
from __future__ import annotations

import contextlib
import os


def check_fifo(prio: int | None) -> None:
    """``prio`` is None (the normal scheduler) or a SCHED_FIFO priority this host allows."""
    if prio is None:
        return
    if not hasattr(os, "sched_setscheduler"):
        raise ValueError("fifo: this platform has no SCHED_FIFO (Linux only)")
    lo, hi = os.sched_get_priority_min(os.SCHED_FIFO), os.sched_get_priority_max(os.SCHED_FIFO)
    if not (isinstance(prio, int) and not isinstance(prio, bool) and lo <= prio <= hi):
        raise ValueError(f"fifo: a SCHED_FIFO priority is an integer in [{lo}, {hi}], got {prio!r}")


@contextlib.contextmanager
def fifo(prio: int | None):
    """Run the calling thread at SCHED_FIFO ``prio`` inside the block (None: leave it as it is).
    Raises PermissionError with what to do when the process may not (root or CAP_SYS_NICE)."""
    if prio is None:
        yield
        return
    check_fifo(prio)
    before = os.sched_getscheduler(0), os.sched_getparam(0)
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(prio))
    except PermissionError:
        raise PermissionError("fifo: SCHED_FIFO needs root or CAP_SYS_NICE (or leave the priority out and "
                              "give the client a core of its own)") from None
    try:
        yield
    finally:
        os.sched_setscheduler(0, before[0], before[1])


def probe_fifo(prio: int | None) -> None:
    """Raise what ``fifo(prio)`` would (a bad value, no right to it) now, by switching to it and
    straight back: a run learns it before it prepares or sends anything."""
    with fifo(prio):
        return


def fifo_refusal(prio: int | None) -> str | None:
    """``probe_fifo``'s refusal as one line (for a script's argument check), or None."""
    try:
        probe_fifo(prio)
    except (ValueError, PermissionError) as err:
        return str(err)
    return None
