"""From an experiment spec to its runs, every arm checked before anything is simulated.

A run's scenario is the base scenario with, in this order, the experiment's ``set``, the
deployment's, the workload's and the policy's overrides, then the replicate's ``seed`` and
``replicate_set`` values. An override the scenario schema refuses (unknown field, wrong type,
unknown plug-in key or parameter) fails the experiment at once, naming the arm that brought
it; a run that is well-formed but does not fit its hardware is recorded as infeasible when
it runs, as sweeps do.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..explore.fingerprint import cache_key, config_id
from ..explore.plan import absolutize, static_check
from ..specs.catalog import scenario_path
from ..specs.errors import SpecError
from ..specs.scenario import apply_overrides, normalize_cluster, read_scenario_data
from ..specs.trust import Trust
from .evaluate import QUANTILES
from .spec import Arm, ExperimentSpec

EVALUATION = {"mode": "experiment", "format": 1, "quantiles": len(QUANTILES)}  # what a cached row depends on


@dataclass
class Run:
    index: int
    deployment: str
    workload: str
    policy: str
    replicate: int
    seed: int
    load: float | None
    data: dict  # the full scenario (file paths absolute)
    run_id: str  # stable hash of ``data``
    cache_key: str  # ``data``, the files it reads, the simulator code, the evaluation


@dataclass
class ExperimentPlan:
    spec: ExperimentSpec
    source: str  # the experiment file
    base_dir: Path  # the base scenario's folder (relative paths in runs resolve here)
    runs: list[Run]
    trust: Trust = field(default_factory=Trust)


def _apply(data: dict, overrides: dict[str, Any], source: str, where: str) -> dict:
    try:
        return normalize_cluster(apply_overrides(data, overrides))
    except SpecError as err:
        raise SpecError(err.message, source=source, field=f"{where}.{err.field}" if err.field else where) from None


def load_base(spec: ExperimentSpec, exp_dir: Path, source: str, trust: Trust) -> tuple[dict, Path]:
    cand = exp_dir / spec.base
    try:
        path = cand if cand.is_file() else scenario_path(spec.base)
        trust.check_path(path, source, "base")
        data = read_scenario_data(path)
    except SpecError as err:
        raise SpecError(f"cannot load the base scenario: {err}", source=source, field="base") from None
    return _apply(data, spec.set, source, "set"), path.resolve().parent


def _checked(data: dict, base_dir: Path, trust: Trust, source: str, blame: str):
    """The parsed scenario of ``data``, or a SpecError naming ``blame`` (the arm that broke it)."""
    found = static_check(data, base_dir, trust)
    if isinstance(found, SpecError):
        where = f"{blame}: {found.field}" if found.field else blame
        raise SpecError(found.message, source=source, field=where) from None
    return found[0]


def build_plan(spec: ExperimentSpec, exp_dir: Path, source: str, trust: Trust | None = None) -> ExperimentPlan:
    """Every run of ``spec`` (deployment-major, then workload, policy, replicate)."""
    trust = trust or Trust()
    base, base_dir = load_base(spec, exp_dir, source, trust)
    dirs = [base_dir, exp_dir]
    _checked(base, base_dir, trust, source, "base")
    runs: list[Run] = []
    memo: dict[str, str] = {}
    checked: set[tuple[str, ...]] = set()

    def arm(data: dict, a: Arm, kind: str, key: tuple[str, ...]) -> dict:
        out = _apply(data, a.set, source, f"{kind}[{a.name}].set")
        if key not in checked:  # blame the first arm whose overrides break the scenario
            _checked(out, base_dir, trust, source, f"{kind}[{a.name}]")
            checked.add(key)
        return out

    for d in spec.deployments:
        with_d = arm(base, d, "deployments", (d.name,))
        for w in spec.workloads:
            with_w = arm(with_d, w, "workloads", (d.name, w.name))
            for p in spec.policies:
                with_p = arm(with_w, p, "policies", (d.name, w.name, p.name))
                for r, seed in enumerate(spec.seeds):
                    rep = {"seed": seed, **{k: v[r] for k, v in spec.replicate_set.items()}}
                    data = absolutize(_apply(copy.deepcopy(with_p), rep, source, f"replicate_set[{r}]"), dirs)
                    blame = f"replicate_set[{r}]" if spec.replicate_set else "seeds"
                    sc = _checked(data, base_dir, trust, source, blame)
                    runs.append(Run(len(runs), d.name, w.name, p.name, r, seed, w.load, data, config_id(data),
                                    cache_key(data, sc, base_dir, EVALUATION, memo)))
    return ExperimentPlan(spec, source, base_dir, runs, trust)
