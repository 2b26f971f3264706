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
import functools
import hashlib
import itertools
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..api import resolve_scenario
from ..sim.control.router import ROUTERS
from ..specs.catalog import hardware_dir, load_hardware_ref, load_model_ref, models_dir, resolve, scenario_path
from ..specs.errors import SpecError
from ..specs.scenario import Scenario, apply_overrides, normalize_cluster, parse_scenario, read_scenario_data
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


# ---------------------------------------------------------------- hashing

def _canon(x: Any) -> Any:
    """Integral floats as ints, so ``30`` and ``30.0`` hash alike (the schema reads them alike)."""
    if isinstance(x, dict):
        return {str(k): _canon(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_canon(v) for v in x]
    if isinstance(x, float) and x.is_integer():
        return int(x)
    if isinstance(x, np.generic):
        return _canon(x.item())
    return x


def stable_hash(obj: Any, n: int = 12) -> str:
    blob = json.dumps(_canon(obj), sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha1(blob).hexdigest()[:n]


def config_id(data: dict) -> str:
    """Stable short hash of a configuration's full scenario data."""
    return stable_hash(data)


# What a simulation's result depends on besides the scenario data: the code that simulates
# and measures, and the hardware profile, model and trace files the scenario names.
SIM_CODE = ("api.py", "sim", "costs", "workload", "metrics", "specs", "registry.py", "explore/search.py")


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """Hash of pdsim's simulation code: a cache entry is reused only by the same simulator."""
    from .. import __version__

    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha1(__version__.encode())
    for part in SIM_CODE:
        p = root / part
        for f in sorted(p.rglob("*.py")) if p.is_dir() else [p]:
            if f.is_file():
                h.update(str(f.relative_to(root)).encode())
                h.update(f.read_bytes())
    return h.hexdigest()[:16]


@functools.lru_cache(maxsize=256)
def _file_hash(path: str, mtime_ns: int, size: int, content: bool) -> str:
    if not content:  # large files (traces): identified by size and modification time
        return f"{size}:{mtime_ns}"
    return hashlib.sha1(Path(path).read_bytes()).hexdigest()[:16]


def _fingerprint(path: Path, content: bool = True) -> str:
    st = path.stat()
    return _file_hash(str(path.resolve()), st.st_mtime_ns, st.st_size, content)


def input_files(sc: Scenario, base_dir: Path) -> dict[str, str]:
    """Fingerprints of the files a scenario reads (profile, model, trace)."""
    out = {"hardware": _fingerprint(resolve(sc.hardware, hardware_dir(), "hardware profile", base_dir, "", "")),
           "model": _fingerprint(resolve(sc.model, models_dir(), "model", base_dir, "", ""))}
    tr = sc.workload.trace
    if tr is not None:
        p = Path(tr.path) if Path(tr.path).is_absolute() else base_dir / tr.path
        out["trace"] = _fingerprint(p, content=False) if p.is_file() else "missing"
    return out


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


def load_base(spec: SweepSpec, sweep_dir: Path, source: str) -> tuple[dict, Path]:
    """The base scenario data with the sweep's ``set`` and ``slo`` applied."""
    cand = sweep_dir / spec.base
    try:
        path = cand if cand.is_file() else scenario_path(spec.base)
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

def static_check(data: dict, base_dir: Path) -> tuple[Scenario, Any] | SpecError:
    """Schema-level check (types, ranges, known keys and references); no hardware fit."""
    try:
        sc = parse_scenario(copy.deepcopy(data), "<config>")
        hw = load_hardware_ref(sc.hardware, base_dir)
        load_model_ref(sc.model, base_dir)
        ROUTERS.get(sc.router.policy, field="router.policy")
        return sc, hw
    except SpecError as err:
        return err


def _context_points(others: list[list[dict]], seed: int) -> list[tuple[dict, ...]]:
    sizes = [len(o) for o in others]
    total = int(np.prod(sizes)) if sizes else 1
    if total <= CONTEXT_LIMIT:
        return list(itertools.product(*others))
    rng = np.random.default_rng(seed)
    picks = rng.choice(total, size=CONTEXT_LIMIT, replace=False)
    return [tuple(o[i] for o, i in zip(others, np.unravel_index(int(p), sizes))) for p in sorted(picks)]


def validate_axes(spec: SweepSpec, base: dict, base_dir: Path, source: str) -> list[list[dict]]:
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
            err = static_check(_apply(base, pt, source, f"axes[{i}]"), base_dir)
            if not isinstance(err, SpecError):
                continue
            if not err.message.startswith("unknown field"):
                for ctx in _context_points(others, spec.search.seed):
                    merged = dict(pt)
                    for c in ctx:
                        merged.update(c)
                    if not isinstance(static_check(_apply(base, merged, source, f"axes[{i}]"), base_dir), SpecError):
                        break
                else:
                    ctx = None
                if ctx is not None:
                    continue
            value = ", ".join(f"{k}={v!r}" for k, v in pt.items())
            raise SpecError(f"{err.message} (axis value {value})", source=source,
                            field=f"axes[{i}] {err.field or ax.label}")
    return points


def _check_search(spec: SweepSpec, base: dict, base_dir: Path, source: str) -> None:
    s = spec.search
    if s.mode != "max_rate":
        return
    for v in (s.low, s.high):
        err = static_check(_apply(base, {s.rate_field: v}, source, "search.rate_field"), base_dir)
        if isinstance(err, SpecError):
            raise SpecError(f"{s.rate_field} = {v}: {err.message}", source=source, field="search.rate_field")
    kind = (base.get("workload") or {}).get("kind", "synthetic")
    swept = {f for ax in spec.axes for f in ax.fields}
    if s.rate_field == "workload.rate" and kind != "synthetic" and "workload.kind" not in swept:
        raise SpecError(f"workload.rate has no effect on a {kind!r} workload; search the load of a trace with "
                        "rate_field: workload.trace.time_scale", source=source, field="search.rate_field")


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
    total = int(np.prod(sizes)) if sizes else 1
    if spec.search.mode == "random" and spec.search.samples < total:
        rng = np.random.default_rng(spec.search.seed)
        picks = sorted(int(x) for x in rng.choice(total, size=spec.search.samples, replace=False))
        combos = [tuple(p[i] for p, i in zip(points, np.unravel_index(k, sizes))) for k in picks]
    else:
        combos = list(itertools.product(*points))
    out = []
    for combo in combos:
        knobs: dict[str, Any] = {}
        for pt in combo:
            knobs.update(pt)
        out.append(knobs)
    return out


def build_plan(spec: SweepSpec, sweep_dir: Path, source: str) -> Plan:
    """Load the base, validate every axis (raising SpecError on a refused value), expand the
    configurations and mark those that do not fit or break a constraint as infeasible."""
    base, base_dir = load_base(spec, sweep_dir, source)
    points = validate_axes(spec, base, base_dir, source)
    _check_search(spec, base, base_dir, source)
    if not spec.axes:
        err = static_check(base, base_dir)
        if isinstance(err, SpecError):
            raise SpecError(err.message, source=source, field=f"base {err.field or ''}".strip())
    evaluation = spec.search.params()
    cons = spec.constraints
    configs = []
    for i, knobs in enumerate(expand(spec, points)):
        data = absolutize(_apply(base, knobs, source, "axes"), [base_dir, sweep_dir])
        cid = config_id(data)
        cfg = Config(i, knobs, data, cid, "")
        checked = static_check(data, base_dir)
        if isinstance(checked, SpecError):
            cfg.status, cfg.reason = "infeasible", str(checked.at(source=f"configs/{cid}.yaml"))
            configs.append(cfg)
            continue
        sc, hw = checked
        cfg.cache_key = stable_hash({"scenario": data, "files": input_files(sc, base_dir),
                                     "evaluation": evaluation, "code": code_fingerprint()}, 16)
        cfg.layout = layout_of(sc, hw.gpus_per_node)
        try:
            resolve_scenario(copy.deepcopy(data), f"configs/{cid}.yaml", base_dir)
        except SpecError as err:
            cfg.status, cfg.reason = "infeasible", str(err)
        gpus, nodes = cfg.layout["gpus"], cfg.layout["nodes"]
        if cfg.status == "pending" and cons.max_gpus is not None and gpus > cons.max_gpus:
            cfg.status, cfg.reason = "infeasible", f"{gpus} GPUs > max_gpus {cons.max_gpus}"
        if cfg.status == "pending" and cons.max_nodes is not None and nodes > cons.max_nodes + 1e-9:
            cfg.status, cfg.reason = "infeasible", f"{nodes:g} nodes > max_nodes {cons.max_nodes:g}"
        configs.append(cfg)
    return Plan(spec, source, base_dir, configs, evaluation)
