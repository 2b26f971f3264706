"""The one public surface: ``load_scenario`` and ``simulate``. CLI, dashboard and sweeps call these."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from .metrics.results import Results
from . import ingest  # noqa: F401 - registers the real-run file formats with the trace readers
from .sim.resolve import resolve_plugins
from .sim import memory, replicas
from .sim.world import World
from .sim.experts import expert_service_check
from .sim.control.fault_targets import check_fault_targets
from .specs.catalog import load_hardware_ref, load_model_ref, scenario_path
from .specs.errors import SpecError
from .specs.scenario import (ResolvedScenario, Scenario, apply_overrides, normalize_cluster, override_keys,
                             parse_scenario, read_scenario_data, validate_against)
from .specs.trust import Trust
from .specs.yamlio import excerpt
from .workload import materialize
from .workload.materialize import resolve_trace_path
from .workload.table import RequestTable


def resolve_scenario(data: dict, source: str = "<scenario>", base_dir: Path | None = None,
                     trust: Trust | None = None) -> ResolvedScenario:
    """Validate raw scenario data (a dict as read from YAML) against its hardware and model,
    resolve its plug-ins and check every file it names, before any workload is generated.

    ``trust`` (specs/trust.py) says which plug-in modules may be imported and which files may be
    read; the default allows installed plug-ins only and any readable file."""
    trust = trust or Trust()
    data = normalize_cluster(data)
    sc = parse_scenario(data, source)
    base = base_dir or Path(".")
    hw = load_hardware_ref(sc.hardware, base, source, trust)
    model = load_model_ref(sc.model, base, source, trust)
    group_hw = {}
    for role, i, g in sc.cluster.groups():
        if g.hardware is not None:
            try:
                group_hw[(role, i)] = load_hardware_ref(g.hardware, base, source, trust)
            except SpecError as err:
                raise SpecError(err.message, source=source, field=f"cluster.{role}[{i}].hardware") from None
    validate_against(sc, hw, model, source, group_hw)
    check_fault_targets(sc, hw, group_hw, source)
    if sc.experts is not None:
        shw = load_hardware_ref(sc.experts.hardware, base, source, trust, "experts.hardware") if sc.experts.hardware else hw
        if sc.experts.hardware:
            group_hw[("experts", 0)] = shw
        why = expert_service_check(model, sc.experts, shw)
        if why:
            raise SpecError(why, source=source, field="experts.servers")
    try:  # plug-ins and files are checked at load, so a typo fails before any simulation
        plugins = resolve_plugins(sc, trust)
        if sc.workload.trace is not None:
            if trust.sandbox:  # the boundary before existence: one message for any file outside, present or not
                _sandboxed_trace(sc.workload.trace.path, base, trust, source)
            trust.check_path(resolve_trace_path(sc.workload.trace, base), source, "workload.trace.path")
    except SpecError as err:
        raise err.at(source=source) from None
    return ResolvedScenario(sc, hw, model, source, base, plugins, trust, group_hw)


def _sandboxed_trace(path: str, base: Path, trust: Trust, source: str) -> None:
    """A sandboxed scenario's trace file, checked against the trust before it is looked for, and
    looked for in ``base`` only (a working-directory fallback would tell files outside apart)."""
    p = Path(path).expanduser() if "\0" not in path else None
    cand = trust.check_path(p if p.is_absolute() else base / p, source, "workload.trace.path") if p else None
    if cand is None or not cand.is_file():
        raise SpecError(f"trace file not found: {excerpt(path, 80)} (looked in {base})", field="workload.trace.path")


def load_scenario_data(path: str | Path, overrides: list[str] | dict[str, Any] | None = None) -> tuple[dict, Path]:
    p = scenario_path(str(path))
    data = read_scenario_data(p)
    if overrides:
        data = apply_overrides(data, overrides)
    return data, p


def _first_group_key(key: str) -> list[str]:
    """``cluster.decode.count`` as the error path of the first group's field (``cluster.decode[0].count``)."""
    parts = key.split(".")
    if len(parts) >= 3 and parts[0] == "cluster" and "[" not in parts[1]:
        return ["cluster", f"{parts[1]}[0]", parts[2]]
    return []


def load_scenario(path: str | Path, overrides: list[str] | dict[str, Any] | None = None,
                  trust: Trust | None = None) -> ResolvedScenario:
    """Load a scenario YAML (a path or a bundled key), apply ``--set``-style overrides, validate.

    Raises SpecError naming the file and field on any problem.
    """
    data, p = load_scenario_data(path, overrides)
    try:
        return resolve_scenario(data, str(p), p.parent, trust)
    except SpecError as err:
        # a bad value that came from --set is blamed on --set, not on the file
        for key in override_keys(overrides):
            f = err.field or ""
            if f and (f == key or f.startswith((key + ".", key + "[")) or key.startswith(f + ".")
                      or _first_group_key(key) == f.split(".", 3)[:3]):
                raise SpecError(err.message, source="--set", field=f) from None
        raise


def simulate(scenario: ResolvedScenario | str | Path,
             progress: Callable[[float, float, int, int], None] | None = None,
             table: RequestTable | None = None, workers: int | None = 1) -> Results:
    """Run one simulation. ``progress(sim_now_s, wall_s, done, total)`` is called periodically.

    ``table``: play these requests instead of the scenario's workload (e.g. the requests of a
    real run read by ``pdsim.ingest``, so simulated and real requests align one to one).
    ``workers``: processes for a scenario of several ``replicas`` (sim/replicas.py; the result
    does not depend on it); a one-replica scenario runs in this process."""
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
    if sc.replicas is not None and sc.replicas.count > 1:
        try:
            record = replicas.simulate(scenario, table, workers, progress)
        except SpecError as err:
            raise err.at(source=err.source or scenario.source) from None
    else:
        record = World(scenario, table, progress=progress).run()
    if len(table) >= 100_000:
        # the finished world (its processes and their events form reference cycles) holds
        # memory the metrics would otherwise allocate on top of; small runs skip the pause
        memory.release()
    return Results(record, scenario)
