"""Elastic scaling of a world (mixed into World, world.py): control/autoscaler.py drives these.

Instances are added to or drained from a group, expert servers added or removed, and the
autoscaler reads the cluster's state over a window.
"""
from __future__ import annotations

from ..specs.limits import max_instances
from .control.autoscaler import ClusterState, GroupState
from .engine.instance import Instance


class Elastic:
    """Add and remove instances and expert servers; the state the autoscaler reads."""

    def _alloc(self, delta: int) -> None:
        self.alloc_gpus += delta
        self.alloc_log.append((self.env.now, self.alloc_gpus))

    def scale_group(self, role: str, index: int, delta: int) -> None:
        """Add ``delta`` instances to group ``index`` of ``role`` (each serves after its priced
        start-up), or drain ``-delta`` of its serving instances (newest first)."""
        plan = next((p for p in self.plans if p.role == role and p.index == index), None)
        if plan is None:
            raise KeyError(f"the autoscaler named group {role}[{index}], which does not exist")
        if delta > 0:
            room = max_instances() - len(self.instances)
            if delta > room:  # the load-time limit holds at run time too (PDSIM_MAX_INSTANCES)
                if room > 0 or not self._capped_logged:  # once at the limit, not every tick
                    self._capped_logged = True
                    self.log_event("scale_capped", f"{role}[{index}]", f"asked for {delta} more, {max(room, 0)} "
                                   f"fit under PDSIM_MAX_INSTANCES={max_instances()}")
                delta = max(room, 0)
            for _ in range(delta):
                label = plan.group.name or f"{role[0].upper()}{index}"
                k = sum(1 for i in self.instances if i.plan is plan)
                inst = self.builder.instance(plan, len(self.instances), f"{label}.{k}")
                cores = self.builder.host_cores
                if cores is not None:  # on its group's core when the placement gives one for all
                    inst.host_core, inst.host_extra = cores.core_of(role, index, k), cores.extra_of(role, index)
                    inst.host_pollers = cores.pollers_of(role, index)
                    inst.host_poll_away = cores.away_of(role, index)
                    inst.host_beside = cores.beside_of(role, index)
                inst.state = "down"  # not serving until started
                self.instances.append(inst)
                self.fabric.add_links()
                self.fabric_capacity0 = dict(self.fabric.capacity)
                if self.faults is not None:
                    self.faults.by_name[inst.name] = inst
                self._alloc(inst.gpus)
                start = self.restart_time(inst)
                self.log_event("starting", inst.name, f"serving in {start:.1f} s")
                self.env.timeout(start).callbacks.append(lambda _e, i=inst: self.instance_up(i, new=True))
        else:
            up = [i for i in self.instances if i.plan is plan and i.state == "up"]
            for inst in up[::-1][: -delta]:
                if len([i for i in self.instances if i.plan is plan and i.state == "up"]) <= 1:
                    break  # never drain a group's last serving instance
                inst.state = "draining"
                self.members.deregister(inst)
                self.log_event("draining", inst.name, "")
                inst.wake()

    def drained(self, inst: Instance) -> None:
        """A draining instance is empty: its GPUs are released, once no live request is on its way
        to it (a D chosen at routing, its KV pulled when P is done: NCCL GET; it is served first)."""
        if inst.state != "draining":
            return
        if any(r.d_inst == inst.iid and not r.done for r in self.live.values()):
            return
        inst.state = "down"
        self._capacity(-inst.gpus)
        self._alloc(-inst.gpus)
        self.log_event("removed", inst.name, "drained")

    def scale_experts(self, delta: int) -> None:
        if self.experts is None:
            raise KeyError("the autoscaler scaled an expert service the scenario does not have")
        for _ in range(max(0, delta)):
            i = self.experts.add_server()
            self._alloc(1)
            self.log_event("starting", f"expert{i}", "")
        for _ in range(max(0, -delta)):
            if self.experts.remove_server():
                self._alloc(-1)

    def restart_time(self, inst: Instance) -> float:
        from ..costs.restart import restart_s
        from ..specs.memory import weights_per_gpu

        plan, g = inst.plan, inst.plan.group
        w = weights_per_gpu(plan.model, plan.world, plan.attn_tp, g.ep, g.engine.ep_num_redundant_experts)
        spec = self.faults.spec.restart if self.faults is not None else None
        return restart_s(w, plan.world, g.engine.cuda_graph_max_bs > 0, spec)

    def cluster_state(self, window_s: float) -> ClusterState:
        now = self.env.now
        groups = []
        for plan in self.plans:
            insts = [i for i in self.instances if i.plan is plan]
            up = [i for i in insts if i.state == "up"]
            busy = 0.0
            for i in up:
                prev = self._busy_seen.get(i.iid, i.busy_time)
                busy += (i.busy_time - prev) / window_s
                self._busy_seen[i.iid] = i.busy_time
            groups.append(GroupState(plan.role, plan.index, len(up),
                                     sum(1 for i in insts if i.state == "down" and i.iid not in self._ever_up),
                                     sum(1 for i in insts if i.state == "draining"),
                                     sum(i.queue_len for i in up), busy / len(up) if up else 0.0))
        while self._recent and self._recent[0][0] < now - window_s:
            self._recent.popleft()
        ok = [o for _t, o in self._recent]
        arrived = self.created - self._arrived_seen
        self._arrived_seen = self.created
        return ClusterState(now, groups, self.experts.servers_up if self.experts else None,
                            self.experts.allocated if self.experts else None,
                            sum(ok) / len(ok) if ok else None, len(ok), arrived / window_s)
