"""Check suggestions by re-simulating them: the run's scenario with a suggestion's ``--set``
overrides, on the same workload and seed, within a bounded budget.

A run that took more than ``max_run_wall_s`` of wall time is not re-simulated (its
suggestions say so); otherwise suggestions are tried most severe verdict first, at most
``max_checks`` runs and until ``budget_s`` seconds of wall time are spent. An override that the
scenario's validation refuses (a memory check, a divisibility rule) is reported as such.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Any

from ..metrics.verdicts import Check, Suggestion, Verdict
from ..metrics.detectors import diagnose as _diagnose


def plain(obj: Any) -> Any:
    """A spec dataclass as the plain YAML-like data it was built from (lists, not tuples)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: plain(getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.init}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    return obj


def resimulate(resolved, overrides: tuple[str, ...]):
    """Results of ``resolved`` with ``overrides`` applied (a SpecError when they are refused)."""
    from ..api import resolve_scenario, simulate
    from ..specs.scenario import apply_overrides

    data = apply_overrides(plain(resolved.scenario), list(overrides))
    return simulate(resolve_scenario(data, resolved.source, resolved.base_dir, resolved.trust))


def _metric(summary: dict, metric: str | None) -> float | None:
    v = summary.get(metric) if metric else None
    return float(v) if isinstance(v, (int, float)) else None


def check_suggestions(res, verdicts: list[Verdict], budget_s: float = 60.0, max_checks: int = 4,
                      max_run_wall_s: float = 20.0) -> list[Verdict]:
    """The verdicts with each suggestion's Check filled where the budget allows."""
    from ..specs.errors import SpecError

    if res.scenario is None:
        return _annotate(verdicts, "not checked: a real run has no scenario to re-simulate")
    wall = res.record.wall_s
    if wall > max_run_wall_s:
        return _annotate(verdicts, f"not checked: the run took {wall:,.1f} s, over the {max_run_wall_s:g} s "
                                   "budget for re-simulating suggestions")
    before = res.summary()
    spent, runs = 0.0, 0
    out = []
    for v in verdicts:
        done = []
        for s in v.suggestions:
            if runs >= max_checks or spent >= budget_s:
                done.append(dataclasses.replace(s, note=f"not checked: re-simulation budget used "
                                                        f"({runs} runs, {spent:,.0f} s)"))
                continue
            t = time.perf_counter()
            try:
                after = resimulate(res.scenario, s.overrides).summary()
            except SpecError as err:
                done.append(dataclasses.replace(s, note=f"not applicable: {err}"))
                spent += time.perf_counter() - t
                continue
            took = time.perf_counter() - t
            spent += took
            runs += 1
            metric = v.metric or "goodput_share"
            done.append(dataclasses.replace(s, check=Check(
                metric, _metric(before, metric), _metric(after, metric), float(before["goodput_share"]),
                float(after["goodput_share"]), int(before["gpus"]), int(after["gpus"]), took)))
        out.append(dataclasses.replace(v, suggestions=tuple(_order(done))))
    return out


def _order(suggestions: list[Suggestion]) -> list[Suggestion]:
    """Checked suggestions that helped first (largest goodput gain, then the metric's gain),
    then the unchecked ones, then those that did not help; the order is otherwise kept."""
    def key(item):
        i, s = item
        c = s.check
        if c is None:
            return (1, 0.0, i)
        if not c.helped:
            return (2, 0.0, i)
        gain = c.goodput_after - c.goodput_before
        rel = (c.before - c.after) / c.before if c.before and c.after is not None else 0.0
        return (0, -(gain + 1e-3 * rel), i)
    return [s for _i, s in sorted(enumerate(suggestions), key=key)]


def _annotate(verdicts: list[Verdict], note: str) -> list[Verdict]:
    return [dataclasses.replace(v, suggestions=tuple(dataclasses.replace(s, note=note) for s in v.suggestions))
            for v in verdicts]


def diagnose(res, check: bool = True, budget_s: float = 60.0, max_checks: int = 4,
             max_run_wall_s: float = 20.0) -> list[Verdict]:
    """The verdicts of a run (pdsim.metrics.detectors.diagnose), most severe first, with their
    suggestions re-simulated (``check``) when the run took at most ``max_run_wall_s`` of wall
    time: at most ``max_checks`` runs and ``budget_s`` seconds in all (check_suggestions)."""
    found = _diagnose(res)
    if check:
        found = check_suggestions(res, found, budget_s=budget_s, max_checks=max_checks, max_run_wall_s=max_run_wall_s)
    return found
