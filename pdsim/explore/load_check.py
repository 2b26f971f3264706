"""A max-rate search must search a field that changes the offered load.

``search: {mode: max_rate}`` bisects ``rate_field`` between ``low`` and ``high``. When that
field does nothing to the workload (``workload.rate`` of a ``fixed_batch``, which sends every
request at t=0; ``workload.trace.time_scale`` of a benchmark result without send times; the
rate of a multi-turn workload, whose sessions start at ``conversation.session_rate``) every probe
simulates the same requests, and the search would report the upper bound as "sustainable".

The check is by experiment, not by a list of cases: the workload of each distinct configuration
is generated at ``low`` and at ``high``, and the search is refused when the arrival times come
out identical. Generating a workload costs little next to the simulations the search runs.
"""
from __future__ import annotations

import copy

import numpy as np

from ..specs.errors import SpecError
from ..specs.scenario import apply_overrides, parse_scenario
from ..workload import materialize

MAX_WORKLOADS_CHECKED = 16  # distinct workloads among the configurations (the first ones, in plan order)


def _hint(kind: str, field: str) -> str:
    if kind == "fixed_batch":
        return "a fixed_batch sends every request at t=0; use kind: synthetic (num_requests, rate) to search a rate"
    if kind in ("multi_turn", "tool_agent"):
        return ("sessions start at workload.conversation.session_rate; search rate_field: "
                "workload.conversation.session_rate")
    if kind == "trace" and field.endswith("time_scale"):
        return ("the trace's requests all arrive at once (a benchmark result without start_times?), so scaling "
                "its time changes nothing; search rate_field: workload.rate, which gives them new arrival times")
    return "search a field that sets the arrival rate"


def check_rate_field(plan) -> None:
    """Raise SpecError at ``search.rate_field`` when the field leaves the arrivals unchanged."""
    ev = plan.evaluation
    if ev.get("mode") != "max_rate":
        return
    field, low, high = ev["rate_field"], ev["low"], ev["high"]
    seen: set[str] = set()
    for cfg in plan.configs:
        if cfg.status != "pending":
            continue
        wl = cfg.data.get("workload")
        key = repr((wl, cfg.data.get("seed")))
        if key in seen:
            continue
        seen.add(key)
        if len(seen) > MAX_WORKLOADS_CHECKED:
            return
        tables = []
        for value in (low, high):
            try:
                sc = parse_scenario(apply_overrides(copy.deepcopy(cfg.data), {field: value}), "<config>")
                tables.append(materialize(sc.workload, seed=sc.seed, base_dir=plan.base_dir))
            except SpecError as err:
                raise SpecError(f"{field} = {value:g} makes the workload of configs/{cfg.config_id}.yaml invalid: "
                                f"{err.message}", source=plan.source, field="search.rate_field") from None
        a, b = tables
        if len(a) == len(b) and np.array_equal(a.arrival_s, b.arrival_s):
            kind = sc.workload.kind
            raise SpecError(f"{field} does not change the arrival times of this {kind!r} workload (the same at "
                            f"{low:g} and {high:g}), so a max_rate search would only report its bound; "
                            f"{_hint(kind, field)}", source=plan.source, field="search.rate_field")
