"""Every plug-in a scenario names, resolved (class + typed parameters) and checked against the
caller's Trust, when the scenario loads: routers, batch schedulers, KV transport, eviction
policy, fault models, autoscaler. ``pdsim.resolve_scenario`` calls this before any workload is
generated; the world only creates what it lists."""
from __future__ import annotations

from ..costs.registry import COST_MODELS
from ..plugins import PluginRef
from ..specs.errors import SpecError
from ..specs.scenario import Scenario
from ..specs.trust import Trust
from ..specs.yamlio import excerpt
from .control.autoscaler import AUTOSCALERS
from .control.faults import FAULTS
from .control.router import ROUTERS
from .engine.scheduler import SCHEDULERS
from .kv.tiers import EVICTION
from .transports import TRANSPORTS

# the scenario field naming each plug-in kind -> its registry (``pdsim list plugins``)
REGISTRIES = {"router.policy": ROUTERS, "engine.schedule_policy": SCHEDULERS, "transfer.backend": TRANSPORTS,
              "kv_offload.eviction": EVICTION, "faults.plugins[].policy": FAULTS, "autoscaler.policy": AUTOSCALERS}


def resolve_plugins(sc: Scenario, trust: Trust | None = None) -> dict[str, PluginRef]:
    """The scenario's plug-ins (class + typed parameters), checked against ``trust``."""
    trust = trust or Trust()
    out = {"router": ROUTERS.resolve(sc.router.policy, sc.router.params, "router.policy", trust,
                                     params_field="router.params"),
           "transport": TRANSPORTS.resolve(sc.transfer.backend, sc.transfer.params, "transfer.backend", trust,
                                           params_field="transfer.params"),
           "schedulers": {(role, gi): SCHEDULERS.resolve(g.engine.schedule_policy, g.engine.schedule_params,
                                                         f"cluster.{role}[{gi}].engine.schedule_policy", trust,
                                                         params_field=f"cluster.{role}[{gi}].engine.schedule_params")
                          for role, gi, g in sc.cluster.groups()}}
    if sc.autoscaler is not None:
        out["autoscaler"] = AUTOSCALERS.resolve(sc.autoscaler.policy, sc.autoscaler.params, "autoscaler.policy", trust,
                                                params_field="autoscaler.params")
        ref = out["autoscaler"]
        try:
            ref.cls.check_cluster(ref.params, {(r, i): g.count for r, i, g in sc.cluster.groups()},
                                  sc.experts is not None)
        except SpecError as err:
            raise SpecError(err.message, field=f"autoscaler.params.{err.field}" if err.field else "autoscaler.params") \
                from None
    if sc.faults is not None:
        out["faults"] = [FAULTS.resolve(f.policy, f.params, f"faults.plugins[{i}].policy", trust,
                                        params_field=f"faults.plugins[{i}].params")
                         for i, f in enumerate(sc.faults.plugins)]
    if sc.kv_offload is not None:
        out["eviction"] = EVICTION.resolve(sc.kv_offload.eviction, None, "kv_offload.eviction", trust)
    if sc.cost_model not in ("auto", *COST_MODELS):
        raise SpecError(f"unknown cost model {excerpt(sc.cost_model)}; expected auto, {', '.join(COST_MODELS)}",
                        field="cost_model")
    return out


