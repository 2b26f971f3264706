"""What a configuration's result depends on, hashed: the key of the sweep cache.

A cached row is reused only when all of these are unchanged:
- the configuration's scenario data (``config_id`` hashes that alone);
- the bytes of every file the scenario reads: the hardware profile (which carries the
  calibration constants ``pdsim calibrate fit`` writes), the model, every group's own hardware
  profile, every speculative draft model, the expert servers' hardware, the storage catalogue
  when KV offload is on, the trace, and the source file of every ``module:Class`` plug-in it
  names from outside pdsim;
- pdsim's version and the code that simulates and measures (the whole package except the
  report, CLI, dashboard and sweep-driver modules, which do not change a row);
- how the configuration is evaluated (plain run or max-rate search and its target).
So ``calibrate fit``, an edited model file or an upgrade never reuses a stale row.
"""
from __future__ import annotations

import functools
import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np

from ..specs.catalog import hardware_dir, models_dir, resolve
from ..specs.scenario import Scenario

# Parts of the package that never change a simulated row (everything else is hashed).
NOT_SIMULATION = ("report", "cli", "dashboards", "explore", "calibrate")
SIMULATION_EXTRA = ("explore/search.py",)  # the sweep evaluates configurations through this


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


def _simulation_files(root: Path) -> list[Path]:
    files = []
    for f in sorted(root.rglob("*.py")):
        rel = f.relative_to(root)
        if rel.parts[0] in NOT_SIMULATION and str(rel) not in SIMULATION_EXTRA:
            continue
        files.append(f)
    return files


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """Hash of pdsim's version and simulation code: a cache entry is reused only by the same
    simulator."""
    from .. import __version__

    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha1(__version__.encode())
    for f in _simulation_files(root):
        h.update(str(f.relative_to(root)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def file_digest(path: Path, memo: dict[str, str] | None = None) -> str:
    """Content digest of a file. ``memo`` (one per plan) reads each file once however many
    configurations name it; it is not kept across plans, so an edit that keeps the file's size
    and modification time is still seen by the next sweep run."""
    key = str(path.resolve())
    if memo is not None and key in memo:
        return memo[key]
    h = hashlib.blake2b(digest_size=12)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    if memo is not None:
        memo[key] = h.hexdigest()
    return h.hexdigest()


def _digest_ref(ref: str, folder: Path, kind: str, base_dir: Path, memo: dict[str, str] | None) -> str:
    """Digest of a bundled key or path as the loaders resolve it; ``missing`` when it does not
    resolve (the scenario's validation then refuses it, so no row is ever cached for it)."""
    from ..specs.errors import SpecError

    try:
        return file_digest(resolve(ref, folder, kind, base_dir, "", ""), memo)
    except (SpecError, OSError):
        return "missing"


def input_files(sc: Scenario, base_dir: Path, memo: dict[str, str] | None = None) -> dict[str, str]:
    """Content digests of every file a scenario reads, keyed by the field that names it: the
    scenario's hardware profile and model, each group's own ``hardware``, each speculative
    ``draft_model``, the expert servers' ``experts.hardware``, the storage catalogue when KV
    offload is on, and the trace. Whatever the loaders (api.load_resolved, sim/build.py) open
    must be listed here, or an edit of that file reuses a stale row."""
    hw, models = hardware_dir(), models_dir()
    out = {"hardware": _digest_ref(sc.hardware, hw, "hardware profile", base_dir, memo),
           "model": _digest_ref(sc.model, models, "model", base_dir, memo)}
    for role, i, g in sc.cluster.groups():
        where = f"cluster.{role}[{i}]"
        if g.hardware is not None:
            out[f"{where}.hardware"] = _digest_ref(g.hardware, hw, "hardware profile", base_dir, memo)
        spec = g.engine.speculative
        if spec is not None and spec.draft_model is not None:
            out[f"{where}.engine.speculative.draft_model"] = _digest_ref(spec.draft_model, models, "model",
                                                                         base_dir, memo)
    if sc.experts is not None and sc.experts.hardware:
        out["experts.hardware"] = _digest_ref(sc.experts.hardware, hw, "hardware profile", base_dir, memo)
    if sc.kv_offload is not None:
        out["storage"] = file_digest(hardware_dir() / "storage.yaml", memo)
    tr = sc.workload.trace
    if tr is not None:
        from ..specs.errors import SpecError
        from ..workload.materialize import resolve_trace_path

        try:  # the file the run reads (base_dir first, then the working directory)
            out["trace"] = file_digest(resolve_trace_path(tr, base_dir), memo)
        except (SpecError, OSError):
            out["trace"] = "missing"
    return out


_PLUGIN_REF = re.compile(r"^([A-Za-z_][\w.]*):[A-Za-z_]\w*$")


def _strings(x: Any):
    if isinstance(x, str):
        yield x
    elif isinstance(x, dict):
        for v in x.values():
            yield from _strings(v)
    elif isinstance(x, (list, tuple)):
        for v in x:
            yield from _strings(v)


def plugin_files(data: dict, memo: dict[str, str] | None = None) -> dict[str, str]:
    """Digests of the source files of the ``module:Class`` plug-ins a configuration names that
    live outside pdsim (an edited plug-in changes its rows). Only modules already imported are
    read: plan building loads every scenario, which imports its allowed plug-ins, so no module
    is imported here. The module's own file is hashed, not the modules it imports."""
    root = Path(__file__).resolve().parents[1]
    out = {}
    for s in _strings(data):
        m = _PLUGIN_REF.match(s)
        mod = sys.modules.get(m.group(1)) if m else None
        f = getattr(mod, "__file__", None)
        if f and Path(f).is_file() and root not in Path(f).resolve().parents:
            out[f"plugin {m.group(1)}"] = file_digest(Path(f), memo)
    return out


def cache_key(data: dict, sc: Scenario, base_dir: Path, evaluation: dict, memo: dict[str, str] | None = None) -> str:
    """The cache key of one configuration (see the module doc)."""
    files = {**input_files(sc, base_dir, memo), **plugin_files(data, memo)}
    return stable_hash({"scenario": data, "files": files, "evaluation": evaluation, "code": code_fingerprint()}, 16)
