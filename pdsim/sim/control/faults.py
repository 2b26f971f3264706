"""Fault injection, detection and recovery (specs/faults.py ``faults:``).

The controller kills components at scheduled times (``events``), at random (``random``: per
component exponential times between failures, seeded from the scenario's seed) or as a fault
plug-in decides (``FaultModel``), and maps each onto the instances it takes down:
a GPU takes its whole instance (a monolithic EP group or a TP unit is one failure domain),
a node every instance on it, a NIC its share of the instance's NIC bandwidth (the instance
goes down with its last NIC). A down instance is detected by the heartbeat monitor at its
``misses``-th missed beat; the world then gives up the requests it held (retry or drop) and
restarts it once the failed component is back, after the priced restart time
(costs/restart.py). Everything is recorded as events for the run's timeline.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...costs.restart import restart_s
from ...plugins import Plugin, Registry
from ...specs.errors import SpecError
from ...specs.faults import MAX_TIME_S
from ...specs.limits import check_range
from ...specs.memory import weights_per_gpu

FAULT_RNG_OFFSET = 0x5EED_FA17  # the fault stream is independent of the routing stream
MIN_KILL_INTERVAL_S = 0.1  # kill_every: documented bound (docs/faults.md)
MAX_KILLS = 100_000


class FaultModel(Plugin):
    """A fault plug-in: ``start(ctl)`` runs once at time 0; use ``ctl.env`` (SimPy), ``ctl.rng``
    (seeded), ``ctl.instances`` (names) and ``ctl.kill_gpu/kill_node/kill_nic/kill_expert_server``
    (each with ``recover_after_s``). Run a periodic process with ``ctl.process(gen)`` (it must
    yield only timeouts): then it never keeps a run going once no request can progress."""

    def start(self, ctl: "FaultController") -> None:
        raise NotImplementedError


FAULTS: Registry[FaultModel] = Registry("fault model", FaultModel)


@FAULTS.register("kill_every")
class KillEvery(FaultModel):
    """Kill one GPU of a randomly chosen up instance every ``interval_s`` seconds (first at
    ``start_s``), each back after ``recover_after_s``; at most ``count`` failures."""

    @dataclass(frozen=True)
    class Params:
        interval_s: float = 600.0
        start_s: float = 0.0
        count: int = 1
        recover_after_s: float | None = None
        role: str | None = None  # only instances of this role

        def __post_init__(self) -> None:
            check_range(self.interval_s, MIN_KILL_INTERVAL_S, MAX_TIME_S, "interval_s", "s",
                        why="a failure every 100 ms at most")
            check_range(self.start_s, 0, MAX_TIME_S, "start_s", "s")
            check_range(self.count, 0, MAX_KILLS, "count")
            check_range(self.recover_after_s, 0, MAX_TIME_S, "recover_after_s", "s or null", allow_none=True)
            if self.role is not None and self.role not in ("prefill", "decode", "colocated"):
                raise SpecError(f"expected prefill, decode or colocated, got {self.role!r}", field="role")

    def start(self, ctl):
        p = self.params

        def run():
            yield ctl.env.timeout(p.start_s)
            for _ in range(p.count):
                up = [i for i in ctl.world.instances if i.state == "up" and (p.role is None or i.role == p.role)]
                if up:
                    ctl.kill_gpu(up[int(ctl.rng.integers(len(up)))].name, 0, p.recover_after_s)
                yield ctl.env.timeout(p.interval_s)
        ctl.process(run())


class FaultController:
    def __init__(self, world, spec, seed: int):
        self.world = world
        self.env = world.env
        self.spec = spec
        self.rng = np.random.default_rng((seed + FAULT_RNG_OFFSET) % 2**63)
        self.by_name = {i.name: i for i in world.instances}
        self.by_node: dict[str, list] = {}
        for inst in world.instances:
            for node in inst.nodes:
                self.by_node.setdefault(node, []).append(inst)
        self.nics_down: dict[int, int] = {}  # instance id -> its NICs down
        self.recover_at: dict[int, float] = {}  # instance id -> when its failed component is back
        self.fail_time: dict[int, float] = {}
        self.wait_nic: set[int] = set()  # restarted instances waiting for a NIC to come back

    @property
    def instances(self) -> list[str]:
        return list(self.by_name)

    def process(self, gen) -> None:
        """Run a periodic fault process (see FaultModel)."""
        self.world.daemon(gen)

    # ---- scheduling ----------------------------------------------------------------------
    def start(self, plugins=()) -> None:
        for ev in self.spec.events:
            self.env.timeout(ev.at_s).callbacks.append(lambda _e, ev=ev: self._event(ev))
        for rf in self.spec.random:
            self.process(self._random(rf))
        for ref in plugins:
            ref.create().start(self)

    def _event(self, ev) -> None:
        if ev.kill == "gpu":
            self.kill_gpu(ev.instance, ev.gpu, ev.recover_after_s)
        elif ev.kill == "nic":
            self.kill_nic(ev.instance, ev.recover_after_s)
        elif ev.kill == "node":
            hw = ev.hardware or self.world.hw.name
            self.kill_node(f"{hw}/node{ev.node}", ev.recover_after_s)
        else:
            self.kill_expert_server(ev.server, ev.recover_after_s)

    def _components(self, kind: str) -> list:
        if kind == "gpu":
            return [(i.name, g) for i in self.world.instances for g in range(i.gpus)]
        if kind == "node":
            return sorted(self.by_node)
        if kind == "nic":
            return [i.name for i in self.world.instances]
        return list(range(self.world.experts.n_servers)) if self.world.experts is not None else []

    def _random(self, rf):
        comps = self._components(rf.component)
        if not comps:
            return
        rate = len(comps) / (rf.mtbf_h * 3600.0)  # failures per second, all components together
        back: dict = {}  # component -> when its repair ends
        while True:
            yield self.env.timeout(float(self.rng.exponential(1.0 / rate)))
            c = comps[int(self.rng.integers(len(comps)))]
            # a failed component cannot fail again before its repair: skipping the draws that
            # hit one (thinning) makes each component's up time exponential with mean mtbf_h;
            # counting them would keep a NIC (and its instance) down for good once failures
            # arrive faster than repairs (a 1.5 GB, never-ending run before)
            now = self.env.now
            if back.get(c, -1.0) > now:
                continue
            back[c] = now + rf.mttr_s
            if rf.component == "gpu":
                self.kill_gpu(c[0], c[1], rf.mttr_s)
            elif rf.component == "node":
                self.kill_node(c, rf.mttr_s)
            elif rf.component == "nic":
                self.kill_nic(c, rf.mttr_s)
            else:
                self.kill_expert_server(c, rf.mttr_s)

    # ---- failures --------------------------------------------------------------------------
    def _instance(self, name: str):
        inst = self.by_name.get(name)
        if inst is None:  # a name typo in a timeline is caught at load; plug-ins get this
            raise KeyError(f"no instance {name!r}; instances: {', '.join(self.by_name)}")
        return inst

    def kill_gpu(self, name: str, gpu: int = 0, recover_after_s: float | None = None) -> None:
        """GPU ``gpu`` of instance ``name`` fails: the instance (one failure domain) goes down."""
        inst = self._instance(name)
        self._down(inst, f"gpu_failed:{name}/{gpu}", recover_after_s)

    def kill_node(self, node: str, recover_after_s: float | None = None) -> None:
        """Node ``node`` fails (power, host): every instance on it goes down."""
        for inst in self.by_node.get(node, []):
            self._down(inst, f"node_failed:{node}", recover_after_s)

    def kill_nic(self, name: str, recover_after_s: float | None = None) -> None:
        """One NIC of instance ``name`` fails: its transfers re-share the NICs left; with none
        left the instance cannot exchange KV and goes down."""
        inst = self._instance(name)
        nics = self._nics(inst)
        down = self.nics_down.get(inst.iid, 0) + 1
        self.nics_down[inst.iid] = down
        self._set_nic(inst, nics, down)
        self.world.log_event("nic_failed", inst.name, f"{down} of {nics} NICs down")
        if down >= nics:
            self._down(inst, f"nic_failed:{name}", recover_after_s)
        if recover_after_s is not None:
            self.env.timeout(recover_after_s).callbacks.append(lambda _e: self._nic_back(inst))

    def kill_expert_server(self, server: int, recover_after_s: float | None = None) -> None:
        if self.world.experts is None:
            raise KeyError("kill: expert_server needs an expert service (experts:)")
        self.world.experts.fail_server(server, recover_after_s)

    def _nics(self, inst) -> int:
        hw = inst.plan.hw
        return max(1, round(inst.gpus / hw.gpus_per_node * hw.node.nics_per_node))

    def _set_nic(self, inst, nics: int, down: int) -> None:
        link = f"{inst.name}.nic"
        full = self.world.fabric_capacity0[link]
        self.world.fabric.set_capacity(link, full * max(0, nics - down) / nics)

    def _nic_back(self, inst) -> None:
        down = max(0, self.nics_down.get(inst.iid, 0) - 1)
        self.nics_down[inst.iid] = down
        self._set_nic(inst, self._nics(inst), down)
        self.world.log_event("nic_recovered", inst.name, "")
        if inst.iid in self.wait_nic:  # its restart is done and was waiting for this NIC
            self.wait_nic.discard(inst.iid)
            self.world.instance_up(inst)

    def _down(self, inst, reason: str, recover_after_s: float | None) -> None:
        now = self.env.now
        back = math.inf if recover_after_s is None else now + recover_after_s
        self.recover_at[inst.iid] = max(self.recover_at.get(inst.iid, now), back) if inst.state == "down" else back
        if inst.state == "down":
            return
        self.fail_time[inst.iid] = now
        self.world.fail_instance(inst, reason)
        d = self.spec.detection
        detect_at = (math.floor(now / d.heartbeat_s) + d.misses) * d.heartbeat_s
        # max: floor(now / beat) * beat may round a hair past now
        self.env.timeout(max(0.0, detect_at - now)).callbacks.append(lambda _e: self._detected(inst, reason))

    def _detected(self, inst, reason: str) -> None:
        self.world.detected(inst, reason.split(":")[0])
        back = self.recover_at.get(inst.iid, math.inf)
        if back == math.inf:
            return
        start = max(self.env.now, back)
        delay = start - self.env.now + self.restart_time(inst)
        self.world.log_event("restarting", inst.name, f"serving again in {delay:.1f} s")
        self.env.timeout(delay).callbacks.append(lambda _e: self._restarted(inst))

    def _restarted(self, inst) -> None:
        if self.nics_down.get(inst.iid, 0) >= self._nics(inst):
            self.wait_nic.add(inst.iid)  # still no NIC: up as soon as one is back (_nic_back)
            return
        self.world.instance_up(inst)

    def restart_time(self, inst) -> float:
        """Seconds an instance needs to serve again once it may restart (costs/restart.py)."""
        plan = inst.plan
        g = plan.group
        w = weights_per_gpu(plan.model, plan.world, plan.attn_tp, g.ep, g.engine.ep_num_redundant_experts)
        return restart_s(w, plan.world, g.engine.cuda_graph_max_bs > 0, self.spec.restart)
