"""pdsim: a discrete-event simulator of prefill/decode-disaggregated LLM serving clusters.

Public API::

    import pdsim
    sc = pdsim.load_scenario("workloads/scenarios/dsv3-h800-p4d6.yaml", ["seed=7"])
    res = pdsim.simulate(sc)
    res.summary()            # bench_serving-style metrics
    res.requests             # one row per request (pandas)

The names are imported on first use, so ``import pdsim`` (and the CLI's ``--help``) does not
pay for pandas and the simulator until they are needed.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_LAZY = {
    "load_scenario": ".api", "resolve_scenario": ".api", "simulate": ".api",
    "Results": ".metrics.results", "SpecError": ".specs.errors",
}
__all__ = [*_LAZY, "__version__"]

if TYPE_CHECKING:  # pragma: no cover
    from .api import load_scenario, resolve_scenario, simulate
    from .metrics.results import Results
    from .specs.errors import SpecError


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'pdsim' has no attribute {name!r}")
