"""The one public surface: ``load_scenario`` and ``simulate``. CLI, dashboard and sweeps call these."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from .metrics.results import Results
from .sim.cluster import World
from .sim.router import ROUTERS
from .specs.catalog import load_hardware_ref, load_model_ref, scenario_path
from .specs.errors import SpecError
from .specs.scenario import (ResolvedScenario, apply_overrides, normalize_cluster, parse_scenario,
                             read_scenario_data, validate_against)
from .workload import materialize
from .workload.table import RequestTable


def resolve_scenario(data: dict, source: str = "<scenario>", base_dir: Path | None = None) -> ResolvedScenario:
    """Validate raw scenario data (a dict as read from YAML) against its hardware and model."""
    data = normalize_cluster(data)
    sc = parse_scenario(data, source)
    base = base_dir or Path(".")
    hw = load_hardware_ref(sc.hardware, base, source)
    model = load_model_ref(sc.model, base, source)
    validate_against(sc, hw, model, source)
    try:  # plug-ins are checked at load so a typo fails before any simulation
        ROUTERS.get(sc.router.policy, field="router.policy")
    except SpecError as err:
        raise err.at(source=source) from None
    return ResolvedScenario(sc, hw, model, source, base)


def load_scenario_data(path: str | Path, overrides: list[str] | dict[str, Any] | None = None) -> tuple[dict, Path]:
    p = scenario_path(str(path))
    data = read_scenario_data(p)
    if overrides:
        data = apply_overrides(data, overrides)
    return data, p


def load_scenario(path: str | Path, overrides: list[str] | dict[str, Any] | None = None) -> ResolvedScenario:
    """Load a scenario YAML (a path or a bundled key), apply ``--set``-style overrides, validate.

    Raises SpecError naming the file and field on any problem.
    """
    data, p = load_scenario_data(path, overrides)
    return resolve_scenario(data, str(p), p.parent)


def simulate(scenario: ResolvedScenario | str | Path,
             progress: Callable[[float, float, int, int], None] | None = None,
             table: RequestTable | None = None) -> Results:
    """Run one simulation. ``progress(sim_now_s, wall_s, done, total)`` is called periodically.

    ``table``: play these requests instead of the scenario's workload (e.g. the requests of a
    real run read by ``pdsim.ingest``, so simulated and real requests align one to one)."""
    if not isinstance(scenario, ResolvedScenario):
        scenario = load_scenario(scenario)
    sc = scenario.scenario
    if table is None:
        try:
            table = materialize(sc.workload, seed=sc.seed, base_dir=scenario.base_dir)
        except SpecError as err:
            raise err.at(source=err.source or scenario.source) from None
    if len(table) == 0:
        raise SpecError("the workload produced no requests", source=scenario.source, field="workload")
    record = World(scenario, table, progress=progress).run()
    return Results(record, scenario)
