"""A core's speed for each process under the kernel's group scheduling (autogroup): a pure price.

With autogroup scheduling on (``/proc/sys/kernel/sched_autogroup_enabled`` = 1) every session is a
scheduling group, and Linux's fair scheduler shares each CPU between the groups runnable there, not
between processes. A group's weight on one CPU is its whole weight (nice 0: 1,024) times the share
of its runnable load that sits on that CPU (kernel/sched/fair.c ``calc_group_shares``: ``tg->shares
* load / tg_load``, the cfs_rq's load over the group's load on all CPUs). Within the group, its
runnable processes on that CPU share the group's time; one that spins on ``sched_yield()`` gives its
turn to the others of its group, so it costs them nothing, but it still counts in the group's load
and, alone, uses the group's whole share.

So a group that keeps another CPU busy too weighs less here: a ``sched_yield`` loop of another
session on a job's core takes half of it, the same loop whose session also keeps the other core
busy a third (1.5x), and a job whose own session loads the other core gets half its weight there.
Measured on the 2-core Intel host (kernel 6.18, 2026-11-28; calibration/microbench/group_share.py,
validation/cpu-vllm-calibration/emr3/host-contention/group_share.json): eight arrangements of one
timed job and busy or yielding loops in up to three sessions, each within 4% of this price
(medians of five, 1.44-4.08x against 1.5-4.0x).
"""
from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence


def autogroup_speeds(runnable: Sequence[Mapping[Hashable, tuple[float, float]]],
                     other: Sequence[float]) -> tuple[list[dict[Hashable, float]], list[float]]:
    """Per CPU ``c``: ``runnable[c][g]`` = (working, spinning) runnable processes of group ``g`` on
    ``c`` (fractions: the share of the time one is there; a group's weight follows them as means);
    ``other[c]``: busy processes on ``c``
    outside every listed group, each a group of its own with all its load on ``c`` (weight 1 each).

    Returns (speeds, other_speeds): ``speeds[c][g]`` the speed of each of ``g``'s working processes
    on ``c`` (1 = a core of its own; absent where ``g`` has none working there), and
    ``other_speeds[c]`` that of each outside process there. Groups weigh equally (nice 0)."""
    if len(runnable) != len(other):
        raise ValueError(f"{len(runnable)} CPUs of groups but {len(other)} of other load")
    total: dict[Hashable, float] = {}
    for per in runnable:
        for g, (work, spin) in per.items():
            if work < 0 or spin < 0:
                raise ValueError(f"group {g!r}: runnable counts must be >= 0, got ({work}, {spin})")
            total[g] = total.get(g, 0.0) + work + spin
    speeds: list[dict[Hashable, float]] = []
    others: list[float] = []
    for per, o in zip(runnable, other):
        weight = {g: (w + s) / total[g] for g, (w, s) in per.items() if w + s > 0}
        denom = sum(weight.values()) + o
        # fewer than one working process: one there part of the time, with the group's share to itself
        speeds.append({g: weight[g] / denom / max(w, 1.0) for g, (w, _s) in per.items() if w > 0})
        others.append(1.0 / denom if denom > 0 else 1.0)
    return speeds, others
