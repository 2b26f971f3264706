"""Check suggestions by re-simulating them: the run's scenario with a suggestion's ``--set``
overrides, on the same workload and seed, within a bounded budget.

The budget is wall time: by default the run's own simulation time (``res.record.wall_s``), so
checking the verdicts costs at most what the run did (``budget_s`` raises it: ``pdsim run
--verdict-budget-s``). Suggestions are tried most severe verdict first, at most ``max_checks``
runs; a check starts only when the time left covers what one run is expected to take (the run's
own time, or the slowest check so far), and one that runs past the budget is stopped and says
so. ``on_check(i, n, suggestion, budget_left_s)`` is called before each check (the CLI prints a
progress line). An override that the scenario's validation refuses (a memory check, a
divisibility rule) is reported as such.
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


class OverBudget(Exception):
    """A re-simulation ran past the verdict-check budget."""


def resimulate(resolved, overrides: tuple[str, ...], deadline: float | None = None):
    """Results of ``resolved`` with ``overrides`` applied (a SpecError when they are refused);
    OverBudget when ``deadline`` (time.perf_counter() seconds) passes first."""
    from ..api import resolve_scenario, simulate
    from ..specs.scenario import apply_overrides

    data = apply_overrides(plain(resolved.scenario), list(overrides))
    progress = None
    if deadline is not None:
        def progress(_now, _wall, _done, _n):
            if time.perf_counter() > deadline:
                raise OverBudget()
    return simulate(resolve_scenario(data, resolved.source, resolved.base_dir, resolved.trust), progress=progress)


def _metric(summary: dict, metric: str | None) -> float | None:
    v = summary.get(metric) if metric else None
    return float(v) if isinstance(v, (int, float)) else None


def check_suggestions(res, verdicts: list[Verdict], budget_s: float | None = None, max_checks: int = 4,
                      on_check=None) -> list[Verdict]:
    """The verdicts with each suggestion's Check filled where the budget allows (``budget_s``
    seconds of wall time; None: the run's own simulation time)."""
    from ..specs.errors import SpecError

    if res.scenario is None:
        return _annotate(verdicts, "not checked: a real run has no scenario to re-simulate")
    wall = float(res.record.wall_s)
    budget = wall if budget_s is None else float(budget_s)
    how = (f"the run's own simulation time, {budget:,.1f} s" if budget_s is None else f"{budget:,.1f} s") + \
        "; --verdict-budget-s raises it"
    before = res.summary()
    todo = sum(len(v.suggestions) for v in verdicts)
    spent, runs, expect, seen = 0.0, 0, wall, 0
    out = []
    for v in verdicts:
        done = []
        for s in v.suggestions:
            seen += 1
            if runs >= max_checks or spent + expect > budget:
                done.append(dataclasses.replace(s, note=f"not checked: the verdict-check budget ({how}) allows no "
                                                        f"more runs ({runs} run(s), {spent:,.1f} s)"))
                continue
            if on_check is not None:
                on_check(seen, todo, s, budget - spent)
            t = time.perf_counter()
            try:
                after = resimulate(res.scenario, s.overrides, deadline=t + (budget - spent)).summary()
            except SpecError as err:
                done.append(dataclasses.replace(s, note=f"not applicable: {err}"))
                spent += time.perf_counter() - t
                continue
            except OverBudget:
                took = time.perf_counter() - t
                spent += took
                runs += 1
                done.append(dataclasses.replace(s, note=f"not checked: stopped after {took:,.1f} s, past the "
                                                        f"verdict-check budget ({how})"))
                continue
            took = time.perf_counter() - t
            spent += took
            runs += 1
            expect = max(expect, took)
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


def diagnose(res, check: bool = True, budget_s: float | None = None, max_checks: int = 4,
             on_check=None) -> list[Verdict]:
    """The verdicts of a run (pdsim.metrics.detectors.diagnose), most severe first, with their
    suggestions re-simulated (``check``) within ``budget_s`` seconds of wall time (None: the
    run's own simulation time) and at most ``max_checks`` runs (check_suggestions)."""
    found = _diagnose(res)
    if check:
        found = check_suggestions(res, found, budget_s=budget_s, max_checks=max_checks, on_check=on_check)
    return found
