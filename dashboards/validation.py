"""Validating the scenario in the editor, in the dashboard's sandbox, and routing its errors.

Every scenario text the dashboard receives (editor, upload, a sweep's configs/*.yaml) is read
with pdsim's bounded YAML reader and resolved with ``pdsim.resolve_scenario`` under
``Trust.sandboxed``: no ``module:Class`` plug-in is imported (refused before any import), and
hardware, model and trace files are read only inside the data folder, this server's upload
folder and pdsim's bundled data. Relative paths resolve in the data folder; the bundled
examples' own ``../traces/...`` references resolve where they point (the bundled scenarios
folder). A SpecError is routed to the form control (or form section) of its field.
"""
from __future__ import annotations

import dataclasses
import json
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pdsim
from pdsim.specs import catalog
from pdsim.specs.trust import Trust

from .forms import ALIASES, FIELDS, ROLES, SECTIONS, parse_yaml

TRACE_CONTROL = "f-workload-trace-path"


@dataclass(frozen=True)
class Sandbox:
    """Where the scenarios of one dashboard server may read files from."""

    data_dir: Path
    upload_dir: Path

    @property
    def trust(self) -> Trust:
        return Trust.sandboxed(self.data_dir, self.upload_dir)

    def base_dir_for(self, data: dict) -> Path:
        """The folder relative file references resolve in: the data folder, unless they all
        exist in the bundled scenarios folder and not all in the data folder (an example's
        ``../traces/x.jsonl``)."""
        refs = _relative_refs(data)
        if refs and not all(_exists(self.data_dir, r) for r in refs) and \
                all(_exists(catalog.scenarios_dir(), r) for r in refs):
            return catalog.scenarios_dir()
        return self.data_dir


def _relative_refs(data: dict) -> list[str]:
    out = []
    for key in ("hardware", "model"):
        v = data.get(key)
        if isinstance(v, str) and ("/" in v or v.endswith((".yaml", ".yml"))):
            out.append(v)
    wl = data.get("workload")
    tr = wl.get("trace") if isinstance(wl, dict) else None
    if isinstance(tr, dict) and isinstance(tr.get("path"), str):
        out.append(tr["path"])
    return [r for r in out if r and len(r) < 4096 and not r.startswith(("/", "~"))]


def _exists(folder: Path, rel: str) -> bool:
    try:
        return (folder / rel).exists()
    except (OSError, ValueError):  # embedded NUL, name too long
        return False


def source_name(data: dict) -> str:
    name = data.get("name") if isinstance(data.get("name"), str) else None
    return f"{re.sub(r'[^A-Za-z0-9._-]+', '_', name)[:60] if name else 'scenario'}.yaml"


def route_error(field: str | None) -> tuple[str | None, str]:
    """(control id or None, section) that should show an error at ``field``."""
    if not field:
        return None, "general"
    norm = re.sub(r"^(cluster\.(prefill|decode|colocated))(?!\[)", r"\1[0]", field)
    best, best_len = None, -1
    for cid, f in FIELDS.items():
        if f.path and (norm == f.path or norm.startswith(f.path + ".") or norm.startswith(f.path + "[")):
            if len(f.path) > best_len:
                best, best_len = cid, len(f.path)
    if best is None:
        best = ALIASES.get(norm)
    if best is not None:
        return best, FIELDS[best].section
    for letter, role in ROLES.items():
        if norm.startswith(f"cluster.{role}"):
            return None, letter
    head = norm.split(".")[0].split("[")[0]
    return None, head if head in SECTIONS else ("transfer" if head in ("router", "kv_offload") else "general")


class _TraceChecks:
    """Outcome of reading a trace workload, by trace settings and file stamp (bounded LRU)."""

    def __init__(self, size: int = 64):
        self.size = size
        self._data: OrderedDict[str, tuple | None] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> tuple[bool, tuple | None]:
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                return True, self._data[key]
            return False, None

    def put(self, key: str, value: tuple | None) -> None:
        with self._lock:
            self._data[key] = value
            while len(self._data) > self.size:
                self._data.popitem(last=False)


_TRACE_CHECKS = _TraceChecks()


def check_trace(resolved) -> None:
    """Read a trace workload now, as the run would, so a bad file is reported at the form with
    the CLI's words. The error carries ``control`` so the form shows it at the trace-file
    control. (The path was already checked against the sandbox by resolve_scenario.)"""
    from pdsim.workload import materialize

    wl = resolved.scenario.workload
    if wl.kind != "trace" or wl.trace is None:
        return
    path = Path(wl.trace.path)
    if not path.is_absolute():
        path = resolved.base_dir / path
    try:
        stamp = path.stat().st_mtime_ns
    except OSError:
        stamp = None
    key = json.dumps([dataclasses.asdict(wl.trace), str(resolved.base_dir), stamp], default=str)
    hit, outcome = _TRACE_CHECKS.get(key)
    if not hit:
        try:
            materialize(wl, seed=resolved.scenario.seed, base_dir=resolved.base_dir)
            outcome = None
        except pdsim.SpecError as err:  # as pdsim.simulate reports it
            outcome = (err.message, err.source or resolved.source, err.field)
        except (UnicodeDecodeError, ValueError, OSError, EOFError) as err:  # a reader's gap: still one line
            outcome = (f"cannot read the trace: {type(err).__name__}", resolved.source, "workload.trace.path")
        _TRACE_CHECKS.put(key, outcome)
    if outcome is not None:
        message, source, field = outcome
        err = pdsim.SpecError(message, source=source, field=field)
        err.control = TRACE_CONTROL
        raise err


def check_draft_models(resolved) -> None:
    """Load every speculative ``draft_model`` file as the run will (sim/build.py, in the same
    sandbox), so Validate refuses what Run would: a file outside the data folders, a missing
    or broken model. Groups that do not draft (prefill, MTP) read no file."""
    from pdsim.specs.catalog import load_model_ref

    for role, i, g in resolved.scenario.cluster.groups():
        spec = g.engine.speculative
        if role == "prefill" or spec is None or spec.method == "mtp" or not spec.draft_model:
            continue
        try:
            load_model_ref(spec.draft_model, resolved.base_dir, resolved.source, resolved.trust)
        except pdsim.SpecError as err:
            raise pdsim.SpecError(err.message, source=resolved.source,
                                  field=f"cluster.{role}[{i}].engine.speculative.draft_model") from None


def validate(text: Any, sandbox: Sandbox, check_files: bool = True):
    """(resolved scenario or None, SpecError or None) for the editor's text."""
    try:
        data = parse_yaml(text)
        resolved = pdsim.resolve_scenario(data, source_name(data), sandbox.base_dir_for(data), trust=sandbox.trust)
        check_draft_models(resolved)
        if check_files:
            check_trace(resolved)
        return resolved, None
    except pdsim.SpecError as err:
        return None, err
