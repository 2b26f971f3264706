"""Optional extras: a missing one is a one-line error naming the extra to install.

The core install (``pip install pdsim``) carries everything the simulator, the reports, the
dashboard and the calibration fits import. A few features need a package that most users never
want, declared as an optional extra in pyproject.toml:

- ``replay``: aiohttp, the streaming HTTP client of ``pdsim replay`` and ``pdsim.replay.pd_proxy``;
- ``ray``: Ray, for ``--ray`` sweeps, experiments and replicas;
- ``calibration``: PyTorch, for the microbenchmarks under ``calibration/microbench``.
"""
from __future__ import annotations

import importlib
from types import ModuleType

from .specs.errors import SpecError

#: extra name -> the import names it provides
EXTRAS: dict[str, tuple[str, ...]] = {
    "replay": ("aiohttp",),
    "ray": ("ray",),
    "calibration": ("torch",),
}


class MissingExtra(SpecError):
    """An optional extra is not installed; the message says which one and how to install it."""


def extra_of(module: str) -> str:
    top = module.split(".")[0]
    for extra, names in EXTRAS.items():
        if top in names:
            return extra
    raise KeyError(f"{module} belongs to no optional extra of pdsim")


def require(module: str, feature: str, field: str | None = None) -> ModuleType:
    """Import ``module`` (from an optional extra) or raise :class:`MissingExtra` naming the extra."""
    try:
        return importlib.import_module(module)
    except ImportError:
        extra = extra_of(module)
        raise MissingExtra(f"{feature} needs {module.split('.')[0]}, which is not installed: "
                           f"pip install 'pdsim[{extra}]'", field=field) from None
