"""The profile overlay a fit writes (``pdsim calibrate from-runs`` / ``from-steps``): ``base:`` the
scenario's profile, the fitted efficiency constants, and each constant's source."""
from __future__ import annotations

import datetime as dt
import os
from pathlib import Path


def overlay_yaml(sc, hardware_ref: str, out: Path, eff: dict[str, float], source: str, head: list[str],
                 uncertainty: float | None = None, calibration: dict[str, float] | None = None) -> str:
    """The overlay's text: ``head`` as comment lines, then the YAML. ``eff`` maps efficiency
    field -> fitted value, ``calibration`` a fitted kernel's "MODEL.FIELD" -> value; ``source``
    says how each was fitted (the date is added); ``uncertainty`` (relative, the fit's error where
    it did not look) replaces the base profile's for each fitted constant (a kernel model's
    ``rel_uncertainty``), so ``pdsim sensitivity`` perturbs a fitted constant by its own error, not
    by the prior's it replaced."""
    import yaml

    from ..specs.catalog import hardware_dir, resolve

    date = dt.date.today().isoformat()
    found = resolve(hardware_ref, hardware_dir(), "hardware profile", sc.base_dir, sc.source, "hardware")
    bundled = found.resolve() == (hardware_dir() / f"{hardware_ref}.yaml").resolve()
    # a bundled key stays a key; a profile file is named relative to the overlay's folder
    base = hardware_ref if bundled else os.path.relpath(found.resolve(), out.resolve().parent)
    doc = {"base": base, "name": f"{sc.hardware.name}-fitted",
           "description": f"{sc.hardware.name} with deployment constants refitted from real runs ({date})"}
    if eff:
        doc["efficiency"] = {k: round(v, 4) for k, v in eff.items()}
        doc["sources"] = {f"efficiency.{k}": f"fitted: {source.replace('{date}', date)}" for k in eff}
        if uncertainty is not None and uncertainty == uncertainty:  # not NaN: something was held out
            doc["uncertainty"] = {f"efficiency.{k}": round(max(uncertainty, 0.01), 4) for k in eff}
    if calibration:
        cal: dict[str, dict[str, float]] = {}
        for key, v in calibration.items():
            model, name = key.split(".")
            cal.setdefault(model, {})[name] = round(v, 4)
            if uncertainty is not None and uncertainty == uncertainty:
                cal[model]["rel_uncertainty"] = round(max(uncertainty, 0.01), 4)
            doc.setdefault("sources", {})[f"calibration.{key}"] = f"fitted: {source.replace('{date}', date)}"
        doc["calibration"] = cal
    return "\n".join(f"# {h}" for h in head) + "\n" + yaml.safe_dump(doc, sort_keys=False, width=110)
