"""Bundled data: hardware profiles, model specs and example scenarios.

They live at the top of the repository (hardware_profiles/, workloads/) and ship inside the
``pdsim`` namespace as package data, so both a checkout and a plain ``pip install`` find them.
"""
from __future__ import annotations

import importlib.resources
from functools import lru_cache
from pathlib import Path

from .errors import SpecError
from .yamlio import excerpt

_REPO = Path(__file__).resolve().parents[2]


def _root(package: str, folder: str) -> Path:
    local = _REPO / folder
    if local.is_dir():
        return local
    try:
        return Path(str(importlib.resources.files(package)))
    except (ModuleNotFoundError, TypeError):  # pragma: no cover - broken install
        raise SpecError(f"bundled data folder {folder}/ not found; reinstall pdsim") from None


def hardware_dir() -> Path:
    return _root("pdsim.hardware_profiles", "hardware_profiles")


def workloads_dir() -> Path:
    return _root("pdsim.workloads", "workloads")


def models_dir() -> Path:
    return workloads_dir() / "models"


def scenarios_dir() -> Path:
    return workloads_dir() / "scenarios"


def traces_dir() -> Path:
    return workloads_dir() / "traces"


def calibration_dir() -> Path:
    return _root("pdsim.calibration", "calibration")


def _keys(folder: Path) -> list[str]:
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []


def hardware_keys() -> list[str]:
    return [k for k in _keys(hardware_dir()) if k != "storage"]


def model_keys() -> list[str]:
    return _keys(models_dir())


def scenario_keys() -> list[str]:
    return _keys(scenarios_dir())


def bundled_roots() -> tuple[Path, ...]:
    """The folders of pdsim's own data (readable by every caller, sandboxed ones included)."""
    return tuple(p.resolve() for p in (hardware_dir(), workloads_dir(), calibration_dir()))


def resolve(ref: str, folder: Path, kind: str, base_dir: Path | None, source: str, field: str,
            trust=None) -> Path:
    """A bundled key (``h800``) or a path (absolute, or relative to the scenario's folder);
    a sandboxed ``trust`` (specs/trust.py) refuses paths outside its data folders."""
    if "/" not in ref and "\\" not in ref and (folder / f"{ref}.yaml").is_file():
        return folder / f"{ref}.yaml"
    for cand in ([base_dir / ref] if base_dir else []) + ([Path(ref)] if trust is None or not trust.sandbox else []):
        if len(str(cand)) >= 4096 or "\0" in str(cand):
            continue
        if trust is not None and trust.sandbox:  # the boundary before existence: no file-existence oracle
            trust.check_path(cand, source, field)
        if cand.is_file():
            return trust.check_path(cand, source, field) if trust is not None else cand
    keys = [k for k in _keys(folder) if k != "storage"]
    raise SpecError(f"unknown {kind} {excerpt(ref, 80)}; expected one of {', '.join(keys)} or a YAML path",
                    source=source, field=field)


@lru_cache(maxsize=64)
def _cached_hw(path: str, mtime: float, trust=None):
    from .hardware import load_hardware

    def overlay_base(ref: str, overlay: Path) -> Path:
        # an overlay's ``base:``: a bundled key or a path relative to the overlay's folder, read
        # under the same trust as the overlay (a sandbox refuses a base outside its data folders)
        return resolve(ref, hardware_dir(), "hardware profile", overlay.parent, str(overlay), "base", trust)

    return load_hardware(path, overlay_base)


@lru_cache(maxsize=64)
def _cached_model(path: str, mtime: float):
    from .hf_config import load_model

    return load_model(path)


def _load_named(loader, p: Path, kind: str, source: str, field: str):
    """Load the file a scenario field names; errors name the scenario and the field. A file
    that is not a spec at all (no mapping at the top) is refused without quoting its content:
    the scenario may name any readable file (``hardware: /etc/passwd``)."""
    try:
        return loader(str(p), p.stat().st_mtime)
    except SpecError as err:
        if err.field is None:
            msg = f"{p} is not a {kind} file (expected a YAML mapping of {kind} fields)"
            if err.message.startswith(("file is", "not UTF-8", "line ", "invalid YAML", "nesting", "the document")):
                msg = f"{p} is not a {kind} file ({err.message.split(';')[0]})"
        else:
            msg = f"{p}: {err.field}: {err.message}"
        raise SpecError(msg, source=source, field=field) from None


def load_hardware_ref(ref: str, base_dir: Path | None = None, source: str = "<scenario>", trust=None,
                      field: str = "hardware"):
    p = resolve(ref, hardware_dir(), "hardware profile", base_dir, source, field, trust)
    return _load_named(lambda path, mtime: _cached_hw(path, mtime, trust), p, "hardware profile", source, field)


def load_model_ref(ref: str, base_dir: Path | None = None, source: str = "<scenario>", trust=None,
                   field: str = "model"):
    p = resolve(ref, models_dir(), "model", base_dir, source, field, trust)
    return _load_named(_cached_model, p, "model", source, field)


def scenario_path(ref: str) -> Path:
    """A bundled scenario key or a path."""
    p = Path(ref)
    if p.is_file():
        return p
    cand = scenarios_dir() / f"{ref}.yaml"
    if cand.is_file():
        return cand
    raise SpecError(f"no such scenario file; bundled ones: {', '.join(scenario_keys())}", source=ref)


@lru_cache(maxsize=4)
def _cached_storage(path: str, mtime: float):
    from .storage import load_storage_catalog

    return load_storage_catalog(path)


def load_storage():
    """The storage devices of hardware_profiles/storage.yaml (offload tiers)."""
    p = hardware_dir() / "storage.yaml"
    return _cached_storage(str(p), p.stat().st_mtime)
