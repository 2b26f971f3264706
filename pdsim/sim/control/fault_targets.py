"""Load-time check of what a fault timeline names (``faults.events``): the instance, its GPU,
the node (by index among the nodes of its hardware kind, in placement order, as build.py places
instances) and the expert server must exist, so a typo is an error message and not a crash
or a fault that silently hits nothing."""
from __future__ import annotations

from ...specs.errors import SpecError
from ..build import Placement


def check_fault_targets(sc, hw, group_hw: dict, source: str) -> None:
    """Raise SpecError naming ``faults.events[j].<field>`` for a target the cluster lacks."""
    if sc.faults is None:
        return
    gpus: dict[str, int] = {}
    nodes: dict[str, set[str]] = {}
    placement = Placement()
    names = iter(sc.cluster.instance_names())
    for role, i, g in sc.cluster.groups():
        ghw = group_hw.get((role, i), hw)
        per = g.gpus_per_instance(ghw.gpus_per_node)
        for _k in range(g.count):
            name = next(names)[3]
            gpus[name] = per
            for n in placement.place(ghw, per):
                nodes.setdefault(ghw.name, set()).add(n)
    servers = sc.experts.servers if sc.experts is not None else None
    for j, ev in enumerate(sc.faults.events):
        where = f"faults.events[{j}]"
        if ev.kill in ("gpu", "nic") and ev.instance in gpus and ev.kill == "gpu" and ev.gpu >= gpus[ev.instance]:
            raise SpecError(f"instance {ev.instance} has {gpus[ev.instance]} GPUs (0..{gpus[ev.instance] - 1}), "
                            f"got gpu {ev.gpu}", source=source, field=f"{where}.gpu")
        if ev.kill == "node":
            kind = ev.hardware or hw.name
            have = len(nodes.get(kind, ()))
            if have == 0:
                raise SpecError(f"no node of hardware {kind!r} in the cluster (kinds: {', '.join(sorted(nodes))})",
                                source=source, field=f"{where}.hardware")
            if ev.node >= have:
                raise SpecError(f"the cluster has {have} {kind} nodes (0..{have - 1}), got node {ev.node}",
                                source=source, field=f"{where}.node")
        if ev.kill == "expert_server":
            if servers is None:
                raise SpecError("kill: expert_server needs an expert service (experts:)", source=source,
                                field=f"{where}.kill")
            if ev.server >= servers:
                raise SpecError(f"the expert service has {servers} servers (0..{servers - 1}), got server {ev.server}",
                                source=source, field=f"{where}.server")
    for j, rf in enumerate(sc.faults.random):
        if rf.component == "expert_server" and servers is None:
            raise SpecError("component: expert_server needs an expert service (experts:)", source=source,
                            field=f"faults.random[{j}].component")
