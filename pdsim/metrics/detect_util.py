"""Thresholds and small helpers shared by the bottleneck detectors (detectors*.py)."""
from __future__ import annotations

from .run_facts import RunFacts

# A role busier than this over the arrival window has no slack left for bursts: queues grow.
SATURATED_UTIL = 0.9
# Queueing at least this share of mean TTFT makes waiting, not service, the problem.
QUEUE_SHARE = 0.3
# Add instances until the measured load would sit at this utilisation (room for bursts).
TARGET_UTIL = 0.8
# Prefill steps below this share of the full-step rate the prices allow are not batch-limited
# by the load alone: under DP attention the busiest rank sets each step.
STEP_EFFICIENCY = 0.6
# A verdict on an SLO term needs at least this share of requests missing it.
MISS_SHARE = 0.05
HIGH_SHARE = 0.10  # ... and is severe from this share on
# A bottleneck seen in a TTFT share (transfer, offload loads, uneven routing, page waits) is a
# verdict only when it costs requests their TTFT bound: at least this share of them miss it
# (or the run has no TTFT bound and the part is at least MAJOR_PART of TTFT). Otherwise a run
# meeting its SLO is healthy, and the healthy verdict names its largest TTFT part.
MINOR_MISS = 0.025
MAJOR_PART = 0.5
LOAD_BLIND_ROUTERS = ("random", "round_robin", "vllm_xpyd")
IMBALANCE_UTIL_SPREAD = 0.15  # busy-share gap between the busiest and idlest instance of a role
IMBALANCE_WAIT_RATIO = 1.5  # busiest instance's mean queue wait over the role's mean


def pct(x: float) -> str:
    """A share as a percentage, with a decimal below 1 %."""
    return f"{x:.0%}" if x >= 0.01 or x == 0 else f"{x:.1%}"


def busiest_group(f: RunFacts, role: str) -> tuple[int, list]:
    """(group index, its instances) of the role's busiest instance."""
    insts = f.role(role)
    top = max(insts, key=lambda i: i.util)
    gi = top.group[1]
    return gi, [i for i in insts if i.group == (role, gi)]


def group(res, role: str, gi: int):
    """The GroupSpec ``gi`` of ``role`` in the run's scenario."""
    return getattr(res.scenario.scenario.cluster, role)[gi]


def set_override(role: str, gi: int, path: str, value) -> str:
    """A ``--set`` string for a field of group ``gi`` of ``role``."""
    v = "true" if value is True else "false" if value is False else value
    return f"cluster.{role}[{gi}].{path}={v}"


def misses(f: RunFacts, term: str) -> tuple[int, float]:
    """(requests missing SLO term ``term``, their share of all requests)."""
    n = f.slo_failures.get(term, 0)
    return n, n / max(f.n, 1)


def ttft_matters(f: RunFacts, part_share: float) -> bool:
    """Whether a TTFT part of this share is worth a verdict (see MINOR_MISS)."""
    if f.slo.get("ttft_ms"):
        return misses(f, "ttft")[1] >= MINOR_MISS
    return part_share >= MAJOR_PART
