"""Launch commands for a simulated deployment: ``pdsim launch`` writes the SGLang (or vLLM)
server, router and proxy commands of every instance of a scenario, with the knobs pdsim
simulated, and says which knobs have no launch equivalent.

- ``launch_plan(resolved, engine)``: a LaunchPlan (plan.py) from sglang.py or vllm.py;
- ``script.render(plan)`` / ``script.render_per_node(plan)``: shell;
- flags.py: every flag written, as checked against the engines' sources;
- versions.py: the release ranges (``--engine-version``) and the flag table of each.
"""
from __future__ import annotations

ENGINES = ("sglang", "vllm")


def launch_plan(resolved, engine: str = "sglang", model_path: str | None = None, version: str | None = None,
                ib_devices: str | None = None):
    """The LaunchPlan of a ResolvedScenario for ``engine`` (sglang or vllm) at release ``version``
    (versions.py; default the newest checked), with each node's RDMA devices ``ib_devices``."""
    if engine == "sglang":
        from .sglang import sglang_plan

        return sglang_plan(resolved, model_path, version, ib_devices)
    if engine == "vllm":
        from .vllm import vllm_plan

        return vllm_plan(resolved, model_path, version, ib_devices)
    raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
