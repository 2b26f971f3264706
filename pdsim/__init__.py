"""pdsim: a discrete-event simulator of prefill/decode-disaggregated LLM serving clusters.

Public API::

    import pdsim
    sc = pdsim.load_scenario("workloads/scenarios/dsv3-h800-p4d6.yaml", ["seed=7"])
    res = pdsim.simulate(sc)
    res.summary()            # bench_serving-style metrics
    res.requests             # one row per request (pandas)
"""
from .api import load_scenario, resolve_scenario, simulate
from .metrics.results import Results
from .specs.errors import SpecError

__version__ = "0.1.0"
__all__ = ["load_scenario", "resolve_scenario", "simulate", "Results", "SpecError", "__version__"]
