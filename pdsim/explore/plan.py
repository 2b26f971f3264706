"""From a sweep spec to a list of configurations, every axis validated before any simulation.

Validation has two levels. An axis value the scenario schema refuses (unknown field path,
wrong type, out of range, unknown hardware/model/router key) fails the whole sweep at once,
naming the axis: ``sweep.yaml: axes[2] cluster.decode[0].tp: ...``. A value is refused only
when no combination with the other axes accepts it (so ``dp: 16`` is fine on an axis next to
one that turns ``enable_dp_attention`` on). A combination that is well-formed but does not
fit the hardware (memory, TP/DP/EP divisibility) or the constraints is a point of the sweep:
recorded as infeasible with the reason, not simulated.
"""
from __future__ import annotations

import copy
import itertools
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..api import resolve_plugins, resolve_scenario
from ..specs.catalog import hardware_dir, load_hardware_ref, load_model_ref, models_dir, scenario_path
from ..specs.errors import SpecError
from ..specs.scenario import Scenario, apply_overrides, normalize_cluster, parse_scenario, read_scenario_data
from ..specs.trust import Trust
from .fingerprint import cache_key, code_fingerprint, config_id, input_files, stable_hash  # noqa: F401 - re-exported
from .spec import SweepSpec

CONTEXT_LIMIT = 4096  # combinations of the other axes tried before an axis value is called refused


@dataclass
class Config:
    index: int
    knobs: dict[str, Any]  # axis field path (as written in the sweep) -> value
    data: dict  # the full scenario data (file paths made absolute)
    config_id: str  # stable hash of ``data``
    cache_key: str  # stable hash of ``data``, the files it names, the simulator code, the evaluation
    status: str = "pending"  # pending | infeasible
    reason: str | None = None
    layout: dict[str, Any] = field(default_factory=dict)


@dataclass
class Plan:
    spec: SweepSpec
    source: str  # the sweep file
    base_dir: Path  # where the base scenario lives (relative paths in it resolve here)
    configs: list[Config]
    evaluation: dict  # SearchSpec.params()
    trust: Trust = field(default_factory=Trust)  # what the configurations may import and read


def sample_combinations(sizes: list[int], k: int, seed: int) -> list[tuple[int, ...]]:
    """``k`` distinct index tuples of a grid of ``sizes`` (all of them when k >= the grid), in
    grid order, drawn with ``seed``. Works for grids far beyond 2**63 combinations."""
    total = math.prod(sizes)
    if k >= total:
        return list(itertools.product(*[range(n) for n in sizes]))
    rng = np.random.default_rng(seed)
    if total < 2**62:
        flat = sorted(int(x) for x in rng.choice(total, size=k, replace=False))
        return [tuple(int(i) for i in np.unravel_index(f, sizes)) for f in flat] if sizes else [()]
    picked: set[tuple[int, ...]] = set()  # k << total: collisions are rare, rejection is cheap
    while len(picked) < k:
        picked.add(tuple(int(rng.integers(n)) for n in sizes))
    return sorted(picked)


# ---------------------------------------------------------------- base scenario

def _apply(data: dict, point: dict[str, Any], source: str, where: str) -> dict:
    try:
        return normalize_cluster(apply_overrides(data, point))
    except SpecError as err:
        raise SpecError(err.message, source=source, field=f"{where} {err.field or ''}".strip()) from None


def absolutize(data: dict, dirs: list[Path]) -> dict:
    """Make file references (hardware, model, trace path) absolute so a configuration file
    loads from anywhere (``pdsim run DIR/configs/ID.yaml``). Bundled keys stay keys."""
    out = data

    def fix(ref: Any, bundled: Path | None) -> Any:
        if not isinstance(ref, str) or not ref or Path(ref).is_absolute():
            return ref
        if bundled is not None and (bundled / f"{ref}.yaml").is_file():
            return ref
        for d in dirs:
            if (d / ref).exists():
                return str((d / ref).resolve())
        return ref

    for key, bundled in (("hardware", hardware_dir()), ("model", models_dir())):
        if key in out:
            out[key] = fix(out[key], bundled)
    wl = out.get("workload")
    if isinstance(wl, dict) and isinstance(wl.get("trace"), dict) and "path" in wl["trace"]:
        wl["trace"]["path"] = fix(wl["trace"]["path"], None)
    return out


def load_base(spec: SweepSpec, sweep_dir: Path, source: str, trust: Trust | None = None) -> tuple[dict, Path]:
    """The base scenario data with the sweep's ``set`` and ``slo`` applied (a sandboxed
    ``trust`` reads it only from its data folders)."""
    cand = sweep_dir / spec.base
    try:
        path = cand if cand.is_file() else scenario_path(spec.base)
        if trust is not None:
            trust.check_path(path, source, "base")
        data = read_scenario_data(path)
    except SpecError as err:
        raise SpecError(f"cannot load the base scenario: {err}", source=source, field="base") from None
    base_dir = path.resolve().parent
    for k, v in spec.set.items():
        data = _apply(data, {k: v}, source, f"set[{k}]")
    if spec.slo is not None:
        data["slo"] = asdict(spec.slo)
    return data, base_dir


# ---------------------------------------------------------------- checks

def static_check(data: dict, base_dir: Path, trust: Trust | None = None) -> tuple[Scenario, Any] | SpecError:
    """Schema-level check (types, ranges, known keys and references, plug-ins and their
    parameters under ``trust``); no hardware fit."""
    trust = trust or Trust()
    try:
        sc = parse_scenario(copy.deepcopy(data), "<config>")
        hw = load_hardware_ref(sc.hardware, base_dir, "<config>", trust)
        load_model_ref(sc.model, base_dir, "<config>", trust)
        resolve_plugins(sc, trust)
        return sc, hw
    except SpecError as err:
        return err


def _context_points(others: list[list[dict]], seed: int) -> list[tuple[dict, ...]]:
    picks = sample_combinations([len(o) for o in others], CONTEXT_LIMIT, seed)
    return [tuple(o[i] for o, i in zip(others, idx)) for idx in picks]


def validate_axes(spec: SweepSpec, base: dict, base_dir: Path, source: str,
                  trust: Trust | None = None) -> list[list[dict]]:
    """Every axis' points, each checked against the schema; raises SpecError naming the axis."""
    points = []
    for i, ax in enumerate(spec.axes):
        pts = ax.points()
        for pt in pts:
            _apply(base, pt, source, f"axes[{i}]")  # malformed paths fail here
        points.append(pts)
    for i, pts in enumerate(points):
        others = points[:i] + points[i + 1:]
        for pt in pts:
            err = static_check(_apply(base, pt, source, f"axes[{i}]"), base_dir, trust)
            if not isinstance(err, SpecError):
                continue
            if not err.message.startswith("unknown field"):
                for ctx in _context_points(others, spec.search.seed):
                    merged = dict(pt)
                    for c in ctx:
                        merged.update(c)
                    if not isinstance(static_check(_apply(base, merged, source, f"axes[{i}]"), base_dir, trust),
                                      SpecError):
                        break
                else:
                    ctx = None
                if ctx is not None:
                    continue
            value = ", ".join(f"{k}={v!r}" for k, v in pt.items())
            raise SpecError(f"{err.message} (axis value {value})", source=source,
                            field=f"axes[{i}] {err.field or ax.label}")
    return points


def _check_search_bounds(spec: SweepSpec, base: dict, base_dir: Path, source: str, trust: Trust) -> None:
    s = spec.search
    if s.mode != "max_rate":
        return
    for v in (s.low, s.high):
        err = static_check(_apply(base, {s.rate_field: v}, source, "search.rate_field"), base_dir, trust)
        if isinstance(err, SpecError):
            raise SpecError(f"{s.rate_field} = {v}: {err.message}", source=source, field="search.rate_field")


# ---------------------------------------------------------------- layout

def _unit(g, gpn: int) -> str:
    return f"{g.nodes}" if g.nodes is not None else f"{g.gpus}g"


def _role_layout(letter: str, groups, gpn: int) -> str:
    parts = []
    for g in groups:
        parts.append(f"{letter}{_unit(g, gpn)}" if g.count == 1 else f"({letter}{g.count}x{_unit(g, gpn)})")
    return "".join(parts)


def layout_of(sc: Scenario, gpus_per_node: int) -> dict[str, Any]:
    """Deployment shape in the usual notation: P4D9, (P2x3)D6 (groups of nodes; ``g`` = GPUs)."""
    cl = sc.cluster

    def gpus(groups) -> int:
        return sum(g.count * g.gpus_per_instance(gpus_per_node) for g in groups)

    total = gpus(cl.prefill) + gpus(cl.decode) + gpus(cl.colocated)
    if cl.disaggregated:
        p, d = _role_layout("P", cl.prefill, gpus_per_node), _role_layout("D", cl.decode, gpus_per_node)
        layout = p + d
    else:
        p = d = None
        layout = _role_layout("C", cl.colocated, gpus_per_node)
    return {"layout": layout, "prefill_layout": p, "decode_layout": d, "gpus": total,
            "nodes": total / gpus_per_node, "prefill_gpus": gpus(cl.prefill) if p else None,
            "decode_gpus": gpus(cl.decode) if d else None}


# ---------------------------------------------------------------- expansion

def expand(spec: SweepSpec, points: list[list[dict]]) -> list[dict[str, Any]]:
    """Knob dicts of the configurations, in grid order (random mode: a seeded subset)."""
    sizes = [len(p) for p in points]
    k = spec.search.samples if spec.search.mode == "random" else math.prod(sizes)
    out = []
    for idx in sample_combinations(sizes, k, spec.search.seed):
        knobs: dict[str, Any] = {}
        for p, i in zip(points, idx):
            knobs.update(p[i])
        out.append(knobs)
    return out


def build_plan(spec: SweepSpec, sweep_dir: Path, source: str, trust: Trust | None = None) -> Plan:
    """Load the base, validate every axis (raising SpecError on a refused value), expand the
    configurations and mark those that do not fit or break a constraint as infeasible.
    ``trust`` (specs/trust.py): which plug-in modules and files the configurations may use."""
    from .load_check import check_rate_field

    trust = trust or Trust()
    base, base_dir = load_base(spec, sweep_dir, source, trust)
    points = validate_axes(spec, base, base_dir, source, trust)
    _check_search_bounds(spec, base, base_dir, source, trust)
    if not spec.axes:
        err = static_check(base, base_dir, trust)
        if isinstance(err, SpecError):
            raise SpecError(err.message, source=source, field=f"base {err.field or ''}".strip())
    evaluation = spec.search.params()
    cons = spec.constraints
    configs = []
    digests: dict[str, str] = {}  # each file named by the configurations is read once per plan
    for i, knobs in enumerate(expand(spec, points)):
        data = absolutize(_apply(base, knobs, source, "axes"), [base_dir, sweep_dir])
        cid = config_id(data)
        cfg = Config(i, knobs, data, cid, "")
        checked = static_check(data, base_dir, trust)
        if isinstance(checked, SpecError):
            cfg.status, cfg.reason = "infeasible", str(checked.at(source=f"configs/{cid}.yaml"))
            configs.append(cfg)
            continue
        sc, hw = checked
        cfg.cache_key = cache_key(data, sc, base_dir, evaluation, digests)
        cfg.layout = layout_of(sc, hw.gpus_per_node)
        try:
            resolve_scenario(copy.deepcopy(data), f"configs/{cid}.yaml", base_dir, trust)
        except SpecError as err:
            cfg.status, cfg.reason = "infeasible", str(err)
        gpus, nodes = cfg.layout["gpus"], cfg.layout["nodes"]
        if cfg.status == "pending" and cons.max_gpus is not None and gpus > cons.max_gpus:
            cfg.status, cfg.reason = "infeasible", f"{gpus} GPUs > max_gpus {cons.max_gpus}"
        if cfg.status == "pending" and cons.max_nodes is not None and nodes > cons.max_nodes + 1e-9:
            cfg.status, cfg.reason = "infeasible", f"{nodes:g} nodes > max_nodes {cons.max_nodes:g}"
        configs.append(cfg)
    plan = Plan(spec, source, base_dir, configs, evaluation, trust)
    check_rate_field(plan)
    return plan
