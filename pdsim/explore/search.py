"""Evaluate one configuration: simulate it once, or search its maximum sustainable rate.

Maximum sustainable rate, as serving engineers find it by hand: raise the offered load until
the SLO breaks. Here, bisection on ``rate_field`` between ``low`` and ``high``, on a geometric
scale (rates span orders of magnitude), until the bracket's relative width is below
``tolerance``. The target holds when at least ``target_goodput`` of the requests meet the
per-request SLO and every percentile bound in ``limits`` holds.

Monotone assumption: the target is taken to hold at every load below some threshold and fail
at every load above it (more load never makes latency better). Queueing systems behave so,
and this is what makes bisection valid. Where a configuration is not monotone (for example a
burst that a larger batch happens to absorb), the answer is still a load at which the target
holds, with a failing load within ``tolerance`` above it, but not necessarily the highest such
load. The search is deterministic: same configuration, same probes, same answer.
"""
from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

from ..specs.scenario import apply_overrides
from .spec import METRICS


def simulate_metrics(data: dict, base_dir: str | Path, trust=None) -> dict[str, Any]:
    """One simulation of scenario ``data`` (plug-ins and files as ``trust`` allows); the
    sweep's metric columns."""
    from ..api import resolve_scenario, simulate

    res = simulate(resolve_scenario(copy.deepcopy(data), "<sweep>", Path(base_dir), trust))
    s = res.summary()
    row: dict[str, Any] = {k: s.get(k) for k in METRICS}
    tpot = s.get("mean_tpot_ms")
    row["tokens_per_s_per_user"] = 1000.0 / tpot if tpot else None
    gpus = s.get("gpus") or 0
    row["goodput_per_gpu"] = s["request_goodput"] / gpus if gpus else None
    return row


def meets_target(row: dict, evaluation: dict) -> bool:
    """Whether a simulation's metrics satisfy the search target (a missing metric fails)."""
    tg = evaluation.get("target_goodput")
    if tg is not None and not (row.get("goodput_share") or 0.0) >= tg:
        return False
    for metric, bound in evaluation.get("limits", {}).items():
        v = row.get(metric)
        if v is None or not (isinstance(v, (int, float)) and math.isfinite(v)) or v > bound:
            return False
    return True


def max_sustainable_rate(data: dict, base_dir: str | Path, evaluation: dict, trust=None) -> dict[str, Any]:
    """Bisection for the heaviest load meeting the target; the row holds the metrics at it."""
    field, lo, hi, tol = evaluation["rate_field"], evaluation["low"], evaluation["high"], evaluation["tolerance"]
    inc = evaluation["increasing"]
    light, heavy = (lo, hi) if inc else (hi, lo)  # the load ends of the bracket, in field units
    probes = 0

    def at(v: float) -> dict:
        nonlocal probes
        probes += 1
        return simulate_metrics(apply_overrides(data, {field: v}), base_dir, trust=trust)

    r_light = at(light)
    if not meets_target(r_light, evaluation):
        return {**r_light, "max_rate": 0.0, "probes": probes,
                "search_note": f"target not met even at {field} = {light:g}"}
    r_heavy = at(heavy)
    if meets_target(r_heavy, evaluation):
        return {**r_heavy, "max_rate": heavy, "probes": probes,
                "search_note": f"target still met at the bound {field} = {heavy:g}; widen search.low/high"}
    good, bad, best = light, heavy, r_light
    while max(good, bad) / min(good, bad) - 1.0 > tol:
        mid = math.sqrt(good * bad)
        r = at(mid)
        if meets_target(r, evaluation):
            good, best = mid, r
        else:
            bad = mid
    return {**best, "max_rate": good, "probes": probes, "search_note": None}


def evaluate(data: dict, base_dir: str, evaluation: dict, trust=None) -> dict[str, Any]:
    """One configuration's row (top level, so process pools and Ray ship it by reference).

    A SpecError (e.g. the workload cannot be built) makes the row infeasible with its text;
    any other exception is recorded as ``error`` (not cached, so a rerun retries it)."""
    import time
    import traceback

    from ..specs.errors import SpecError

    t0 = time.perf_counter()
    try:
        if evaluation.get("mode") == "max_rate":
            row = max_sustainable_rate(data, base_dir, evaluation, trust)
            gpus = _gpus(data, base_dir, trust)
            row["max_rate_per_gpu"] = row["max_rate"] / gpus if gpus else None
        else:
            row = simulate_metrics(data, base_dir, trust=trust)
        row["status"], row["reason"] = "ok", None
    except SpecError as err:
        row = {"status": "infeasible", "reason": str(err)}
    except Exception as err:  # noqa: BLE001 - a simulator bug must not sink the other configurations
        tb = traceback.format_exception_only(type(err), err)[-1].strip()
        row = {"status": "error", "reason": tb}
    row["eval_wall_s"] = time.perf_counter() - t0
    return row


def _gpus(data: dict, base_dir: str | Path, trust=None) -> int:
    from ..api import resolve_scenario

    r = resolve_scenario(copy.deepcopy(data), "<sweep>", Path(base_dir), trust)
    gpn = r.hardware.gpus_per_node
    return sum(g.count * g.gpus_per_instance(gpn) for _r, _i, g in r.scenario.cluster.groups())
