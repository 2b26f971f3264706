"""Hardware profile overlays: a profile YAML with ``base:`` names another profile (a bundled key
or a path relative to the overlay's folder) and states only what differs.

    base: cpu-epyc-2c                    # the profile this one starts from
    name: cpu-epyc-2c-fitted
    efficiency: {step_overhead_us: 1180.0}
    sources: {efficiency.step_overhead_us: 'fitted: pdsim calibrate from-runs ...'}

Mappings merge key by key (an overlay's ``efficiency`` changes the constants it names and keeps
the others); any other value replaces the base's. ``pdsim calibrate from-runs`` writes these.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from ._convert import read_yaml
from .errors import SpecError

MAX_DEPTH = 8  # overlays of overlays; deeper is a cycle or a mistake


def merge(base: dict, over: dict) -> dict:
    """``over`` on top of ``base``: nested mappings merged, everything else replaced."""
    out = dict(base)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


#: (the base's reference, the overlay's path) -> the base profile's path
BaseResolver = Callable[[str, Path], Path]


def relative_base(ref: str, overlay: Path) -> Path:
    """The base of an overlay read on its own: a YAML path relative to the overlay's folder
    (bundled keys resolve when the profile is loaded through the catalog: specs/catalog.py)."""
    cand = Path(ref) if Path(ref).is_absolute() else overlay.parent / ref
    if not cand.is_file():
        raise SpecError(f"no profile file {ref!r} next to this overlay (a bundled key such as 'h100' resolves "
                        "when the profile is named by a scenario or pdsim.specs.catalog)", source=str(overlay),
                        field="base")
    return cand


def hardware_data(path: str | Path, resolve_base: BaseResolver = relative_base, depth: int = 0) -> Any:
    """The raw data of a hardware profile YAML, its ``base:`` chain merged in; ``resolve_base``
    finds each base (the catalog passes one that knows the bundled keys)."""
    data = read_yaml(path)
    if not isinstance(data, dict) or "base" not in data:
        return data
    ref = data.pop("base")
    if not isinstance(ref, str) or not ref.strip():
        raise SpecError("expected a hardware profile key or a YAML path", source=str(path), field="base")
    if depth >= MAX_DEPTH:
        raise SpecError(f"more than {MAX_DEPTH} overlays deep (a cycle?)", source=str(path), field="base")
    base_path = resolve_base(ref, Path(path))
    base = hardware_data(base_path, resolve_base, depth + 1)
    if not isinstance(base, dict):
        raise SpecError("the base profile is not a mapping", source=str(base_path))
    return merge(base, data)
