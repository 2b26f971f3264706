"""The world: one SimPy environment playing a request table through a built cluster.

``World(resolved, table).run()`` returns the run's ``RunRecord`` (record.py). The world owns
the clock, the arrivals (open or closed loop), the control plane (membership, router) and the
KV transport, and implements the instances' ports (ports.py). Simulated time only; the
progress callback is the single place wall time is read, and only for display.
"""
from __future__ import annotations

import gc
import math
import os
import time
from collections import deque
from typing import Callable

import numpy as np
import simpy

from ..costs.host import tokenize_s, with_host_sharing
from ..costs.pd_overheads import pd_fixed_costs
from ..specs.limits import max_instances
from ..specs.scenario import ResolvedScenario
from ..workload.table import RequestTable
from .build import Builder, group_plans, pair_plan
from .clock import Clock
from ..costs.registry import resolve_cost_kind
from .control.autoscaler import AutoscaleController, ClusterState, GroupState
from .control.faults import FaultController
from .experts import ExpertService
from .control.membership import Membership
from .control.router import Hold, Reject, Route
from .engine.instance import Instance
from .net.fabric import Fabric
from . import memory, settle
from .kv.tiers import background_write_done
from .ledger import RequestLedger
from .record import DecodeEnds, InstanceInfo, RunRecord, StepTokens
from .request import Request
from .resolve import resolve_plugins
from .transports.base import TransportContext

#: young-generation GC threshold while a world runs (Python's default is 700)
GC_GEN0 = 50_000



def default_plugins(resolved: ResolvedScenario) -> dict:
    """Plug-ins of a scenario resolved without them (registry keys only)."""
    return resolve_plugins(resolved.scenario, resolved.trust)


class World:
    def __init__(self, resolved: ResolvedScenario, table: RequestTable,
                 progress: Callable[[float, float, int, int], None] | None = None):
        resolved = with_host_sharing(resolved)  # host work on shared cores (costs/host.py)
        sc = resolved.scenario
        self.resolved = resolved
        self.hw, self.model = resolved.hardware, resolved.model
        self.env = Clock(horizon=sc.duration_limit_s if sc.duration_limit_s is not None else math.inf)
        self.rng = np.random.default_rng(sc.seed)
        self.table = table
        self.progress = progress
        # conservation checks at the end of the run (tests set PDSIM_CHECK=1; see tests/conftest.py)
        self.check = os.environ.get("PDSIM_CHECK") == "1"
        self.duration_limit = sc.duration_limit_s
        self.n_finished = 0
        self.n_dropped = 0
        # requests in flight by id; a done request is written to the ledger and forgotten
        self.live: dict[int, Request] = {}
        self.created = 0
        self.ledger = RequestLedger(len(table))
        self._all_done = self.env.event()
        self.in_flight = 0
        self._cc_waiting: deque[int] = deque()
        self._held: list[Request] = []  # requests the router holds until membership changes
        # periodic processes (autoscaler ticks, random failures, fault plug-ins): each always has
        # exactly one event queued; when the queue holds nothing else, no request can progress
        # and they must not keep the clock running (settle.py)
        self.daemons = 0
        self.autoscaler = None
        self._capped_logged = False  # the autoscaler met PDSIM_MAX_INSTANCES (logged once)
        fixed = pd_fixed_costs(sc.overheads) if sc.overheads is not None else None
        self.ingress_s = fixed.ingress_s if fixed else 0.0  # arrival -> the router has routed it
        self.egress_s = fixed.egress_s if fixed else 0.0  # a token leaves an engine -> the client has it
        plugins = resolved.plugins if "schedulers" in resolved.plugins else default_plugins(resolved)
        self.transport = plugins["transport"].create(spec=sc.transfer)
        self.plans = group_plans(resolved, self.transport)
        builder = Builder(resolved, self.env, self, table, plugins)
        self.experts = None
        if sc.experts is not None:
            self.experts = builder.experts = ExpertService(self, sc.experts, resolved.hardware_of("experts", 0),
                                                           self.model, resolve_cost_kind(sc.cost_model, self.hw))
        self.instances: list[Instance] = builder.instances(self.plans, self.transport)
        self.builder = builder
        self.fabric = Fabric(self.env, builder.topology.graph)
        for key, tier in builder.shared_tiers.items():
            if tier.device.kind == "remote":
                tier.net = (self.fabric, f"storage.{key}")
        self.members = Membership()
        self.members.disaggregated = self.disaggregated = sc.cluster.disaggregated
        for inst in self.instances:
            self.members.register(inst)
        self._pairs: dict[tuple[int, int], object] = {}
        self.transport.bind(TransportContext(env=self.env, fabric=self.fabric, pair=self._pair,
                                             instance=self.instances.__getitem__, ports=self,
                                             overheads=sc.overheads))
        self.router = plugins["router"].create(rng=self.rng)
        self.router.scenario = sc
        self.env.process(self._client())
        # failures and the cluster's capacity over time (control/faults.py)
        self.events: list[tuple[float, str, str, str]] = []  # (time, kind, what, detail)
        self.retry_causes: dict[str, int] = {}
        self.fabric_capacity0 = dict(self.fabric.capacity)
        self.gpus_up = sum(i.gpus for i in self.instances) + (self.experts.gpus if self.experts else 0)
        self.capacity_log: list[tuple[float, int]] = [(0.0, self.gpus_up)]
        self._ever_up = {i.iid for i in self.instances}
        self.alloc_gpus = self.gpus_up  # GPUs held (serving, starting or being repaired)
        self.alloc_log: list[tuple[float, int]] = [(0.0, self.alloc_gpus)]
        self.faults = None
        if sc.faults is not None:
            self.faults = FaultController(self, sc.faults, sc.seed)
            self.faults.start(plugins.get("faults", ()))
        self._recent: deque[tuple[float, bool]] = deque()  # (finish time, met the TTFT SLO), for autoscalers
        self._busy_seen: dict[int, float] = {}
        self._arrived_seen = 0
        if sc.autoscaler is not None:
            self.autoscaler = AutoscaleController(self, sc.autoscaler, plugins["autoscaler"].create())
        if self.daemons:  # periodic events can keep coming while nothing progresses (settle.py)
            self.daemon(settle.watch(self))

    def daemon(self, gen) -> None:
        """Run ``gen`` as a periodic process that yields only timeouts (see ``daemons``)."""
        def run():
            try:
                yield from gen
            finally:
                self.daemons -= 1
        self.daemons += 1
        self.env.process(run())

    def _pair(self, p: Instance, d: Instance):
        key = (p.iid, d.iid)
        plan = self._pairs.get(key)
        if plan is None:
            plan = self._pairs[key] = pair_plan(p, d, self.resolved)
        return plan

    # ---- arrivals ------------------------------------------------------------------------
    def _client(self):
        t = self.table
        env = self.env
        arrivals, inputs, outputs = t.arrival_s.tolist(), t.input_len.tolist(), t.output_len.tolist()
        hashes = t.hash_ids
        cc = t.max_concurrency
        prios = t.priority.tolist() if getattr(t, "priority", None) is not None else None
        for i in range(len(arrivals)):
            dt = arrivals[i] - env.now
            if dt > 0:
                yield env.timeout(dt)
            # block ids as Python ints: the prefix cache hashes them at every lookup, and numpy
            # scalars hash several times slower
            req = Request(i, arrivals[i], inputs[i], outputs[i], _ids(hashes[i]) if hashes is not None else None)
            if prios is not None:
                req.priority = prios[i]
            self.live[i] = req
            self.created += 1
            if cc is not None and self.in_flight >= cc:
                self._cc_waiting.append(i)  # starts when a slot frees (closed loop)
                continue
            self._start(req)

    def _start(self, req: Request) -> None:
        self.in_flight += 1
        if req.input_len + req.output_len > self.model.max_context:
            self.dropped(req, "exceeds_model_max_context")
            return
        ingress = self.ingress_s + tokenize_s(req.input_len, self.hw.efficiency)  # HTTP, proxy, tokeniser
        if ingress > 0:
            self.env.timeout(ingress).callbacks.append(lambda _e, r=req: self._routed(r))
            return
        self._routed(req)

    def _routed(self, req: Request) -> None:
        req.routed = self.env.now
        if self.faults is not None and self.faults.spec.request_timeout_s is not None:
            attempt = req.retries
            self.env.timeout(self.faults.spec.request_timeout_s).callbacks.append(
                lambda _e, r=req, a=attempt: self._timed_out(r, a))
        self._route(req)

    def _timed_out(self, req: Request, attempt: int) -> None:
        if not req.done and req.retries == attempt:
            self._evict(req, "timeout")

    def _route(self, req: Request) -> None:
        if req.done:
            return  # given up while it waited (a timeout while held)
        decision = self.router.route(req, self.members)
        if isinstance(decision, Route):
            p = self.instances[decision.prefill.iid]
            d = self.instances[decision.decode.iid]
            req.p_inst, req.d_inst = p.iid, d.iid
            # every capacity check before anything is allocated: a request dropped later
            # would strand what P or D already holds for it
            if self.disaggregated:
                reason = p.cannot_hold(req) or d.cannot_hold(req)
                if reason:
                    self.dropped(req, reason)
                    return
                self.transport.routed(req, p, d)
            else:
                reason = p.cannot_hold(req)
                if reason:
                    self.dropped(req, reason)
                    return
                p.enqueue_prefill(req)
        elif isinstance(decision, Reject):
            self.dropped(req, f"rejected_{decision.reason}")
        elif isinstance(decision, Hold):
            if decision.retry_after_s is None:
                self._held.append(req)
            else:
                self.env.timeout(decision.retry_after_s).callbacks.append(lambda _e, r=req: self._route(r))
        else:
            raise TypeError(f"router {type(self.router).__name__} returned {decision!r}, not Route/Hold/Reject")

    # ---- ports (ports.py) ----------------------------------------------------------------
    def kv_allocated(self, req: Request, inst: Instance) -> None:
        self.transport.kv_allocated(req, inst)

    def prefill_done(self, req: Request, inst: Instance) -> None:
        self.transport.prefill_done(req, inst)

    def finished(self, req: Request, inst: Instance) -> None:
        self.n_finished += 1
        self._done(req)
        slo = self.resolved.scenario.slo.ttft_ms
        if slo is not None and self.resolved.scenario.autoscaler is not None:
            self._recent.append((self.env.now, (req.first_token + self.egress_s - req.arrival) * 1e3 <= slo))
        self._release_slot()

    def drained(self, inst: Instance) -> None:
        """A draining instance is empty: its GPUs are released."""
        if inst.state != "draining":
            return
        inst.state = "down"
        self._capacity(-inst.gpus)
        self._alloc(-inst.gpus)
        self.log_event("removed", inst.name, "drained")

    # ---- elastic scaling (control/autoscaler.py drives these) -------------------------------
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

    def dropped(self, req: Request, reason: str) -> None:
        if req.drop_reason is not None:
            return
        req.drop_reason = reason
        self.n_dropped += 1
        self._done(req)
        self._release_slot()

    def _done(self, req: Request) -> None:
        self.ledger.write(req)
        self.live.pop(req.rid, None)
        if self.ledger.written == len(self.table) and not self._all_done.triggered:
            # the last request is done: the run ends now (after the events already due now),
            # not at whatever time the stepping loop happens to look
            self._all_done.callbacks.append(simpy.core.StopSimulation.callback)
            self._all_done.succeed()

    def evicted(self, req: Request, inst: Instance, reason: str) -> None:
        self._evict(req, reason)

    # ---- failures (control/faults.py drives these) -----------------------------------------
    def log_event(self, kind: str, what: str, detail: str) -> None:
        self.events.append((self.env.now, kind, what, detail))

    def _capacity(self, delta: int) -> None:
        self.gpus_up += delta
        self.capacity_log.append((self.env.now, self.gpus_up))

    def fail_instance(self, inst: Instance, reason: str) -> None:
        """``inst`` goes down now: what it held, and the transfers to or from it, are lost with it
        until the failure is detected."""
        inst.fail()
        for req in self.transport.instance_failed(inst):
            if req not in inst.limbo:
                inst.limbo.append(req)
        self._capacity(-inst.gpus)
        self.log_event("failed", inst.name, reason)

    def detected(self, inst: Instance, cause: str, final: bool = False) -> None:
        """The monitor declares ``inst`` dead: the router stops using it; its requests are retried
        or dropped by the retry policy (``final``: dropped, nothing can serve them again)."""
        self.members.deregister(inst)
        inst.detected = True
        lost, inst.limbo = inst.limbo, []
        # requests elsewhere whose other half was on it (P prefilling for a dead D, ...)
        seen = {r.rid for r in lost}
        lost += [r for r in self.live.values() if not r.done and r.rid not in seen and inst.iid in (r.p_inst, r.d_inst)]
        self.log_event("detected", inst.name, f"{len(lost)} requests lost")
        for req in lost:
            self._evict(req, cause if final else f"{inst.role}_{cause}", final)

    def instance_up(self, inst: Instance, new: bool = False) -> None:
        """``inst`` serves again (restarted, or newly added): it joins the router's view."""
        inst.restart()
        self._ever_up.add(inst.iid)
        self.members.register(inst)
        self._capacity(inst.gpus)
        self.log_event("up", inst.name, "added" if new else "restarted")
        held, self._held = self._held, []
        for req in held:
            self._route(req)

    def _evict(self, req: Request, reason: str, final: bool = False) -> None:
        """Give ``req`` up where it is (both of its instances and its transfer), then retry it or
        drop it by the retry policy (``final``: drop it)."""
        if req.done:
            return
        if req in self._held:
            self._held.remove(req)
        for iid in {req.p_inst, req.d_inst}:
            if iid >= 0:
                inst = self.instances[iid]
                if inst._take(req) and inst.state == "up":
                    inst.wake()
        self.transport.abandon(req)
        retry = self.faults.spec.retry if self.faults is not None else None
        if not final and retry is not None and retry.policy == "restart" and req.retries < retry.max_retries:
            self.retry_causes[reason] = self.retry_causes.get(reason, 0) + 1
            req.reset_for_retry()
            delay = retry.backoff_s + self.ingress_s
            if delay > 0:
                self.env.timeout(delay).callbacks.append(lambda _e, r=req: self._routed(r))
            else:
                self._routed(req)
        else:
            self.dropped(req, reason if final or retry is None or retry.policy == "drop" else f"{reason}_after_retries")

    def _release_slot(self) -> None:
        self.in_flight -= 1
        if self._cc_waiting:
            req = self.live[self._cc_waiting.popleft()]
            # a closed-loop client sends when a slot frees; latencies count from the send,
            # as bench_serving measures them under --max-concurrency
            req.arrival = self.env.now
            self._start(req)

    # ---- run ---------------------------------------------------------------------------------
    def run(self, chunk_s: float | None = None) -> RunRecord:
        # the world allocates many short-lived objects and few cycles: collect the young
        # generation less often (~15 % of the wall time at the default threshold of 700)
        thresholds = gc.get_threshold()
        gc.set_threshold(GC_GEN0, *thresholds[1:])
        memory.large_blocks_mapped()  # log chunks freed after the join go back to the system
        try:
            return self._run(chunk_s)
        finally:
            gc.set_threshold(*thresholds)

    def _run(self, chunk_s: float | None) -> RunRecord:
        env = self.env
        n = len(self.table)
        horizon = self.duration_limit
        wall0 = time.perf_counter()
        step = chunk_s or max(1.0, (self.table.duration_s or 60.0) / 50)
        while True:
            nxt = env.peek()
            if nxt == math.inf or settle.only_daemons(self):
                # nothing but periodic processes left: give up what can never be served; a
                # closed loop may then send more (a freed slot), so look again
                if settle.give_up(self):
                    continue
                break  # nothing left to happen (a stuck request is reported below)
            target = max(env.now + step, nxt)  # when idle, jump to the next event
            if horizon is not None:
                if nxt > horizon:
                    break  # the next event lies past the horizon: the clock would never reach it
                target = min(target, horizon)
            # step by hand: simpy's run(until=...) leaves its stop event queued, which would
            # hide an empty schedule (a stuck world) from peek()
            peek, stepper = env.peek, env.step
            try:
                if self.daemons:  # settle the moment only periodic events are left (settle.py)
                    q, daemons = env._queue, self.daemons
                    while peek() <= target:
                        stepper()
                        if len(q) <= daemons and settle.only_daemons(self):
                            break
                else:
                    while peek() <= target:
                        stepper()
            except simpy.core.StopSimulation:
                break  # every request is done (see _done)
            if self.progress:
                self.progress(env.now, time.perf_counter() - wall0, self.n_finished + self.n_dropped, n)
            if self.n_finished + self.n_dropped >= n and self.created == n:
                break
            if horizon is not None and env.now >= horizon:
                break
        undone = [r for r in self.live.values() if not r.done]
        cut = horizon is not None and bool(undone) or self.created < n
        created = self.created
        for req in undone:
            req.drop_reason = "unfinished_at_end" if horizon is not None else "stuck"
            self.ledger.write(req)
        self.live.clear()
        t = self.table
        for i in range(self.created, n):  # arrivals after the horizon
            self.ledger.write_unarrived(i, float(t.arrival_s[i]), int(t.input_len[i]), int(t.output_len[i]),
                                        "not_arrived_by_end",
                                        int(t.priority[i]) if getattr(t, "priority", None) is not None else 0)
        wall = time.perf_counter() - wall0
        if self.check:
            self._check_conservation(n, created, cut)
        return self._record(wall)

    def _check_conservation(self, n: int, created: int, cut: bool) -> None:
        """Test mode (PDSIM_CHECK=1): every request finished or dropped with a reason, and,
        unless the horizon cut the run, every page, queue, batch, buffer and flow empty."""
        errors = []
        cols = self.ledger.cols
        if created + int((cols["drop_reason"] == "not_arrived_by_end").sum()) != n:
            errors.append(f"{n - created} requests never created")
        if self.ledger.written != n:
            errors.append(f"{self.ledger.written} requests written to the record, {n} expected")
        dropped = np.asarray([r is not None for r in cols["drop_reason"]], dtype=bool)
        finished = ~np.isnan(cols["finish_s"])
        undone = np.flatnonzero(~dropped & ~finished).tolist()
        if undone:
            errors.append(f"requests neither finished nor dropped: {undone[:5]}")
        both = np.flatnonzero(dropped & finished).tolist()
        if both:
            errors.append(f"requests both finished and dropped: {both[:5]}")
        stuck = np.flatnonzero(cols["drop_reason"] == "stuck").tolist()
        if stuck:
            errors.append(f"stuck requests: {stuck[:5]}")
        if not cut:
            for i in self.instances:
                cached = i.cache.evictable_pages if i.cache is not None else 0
                if i.pool.used != cached:
                    errors.append(f"{i.name}: {i.pool.used} KV pages in use at the end, {cached} of them cached")
                b = i.batch
                if b.n or b.sum_ctx or b.rem_out or b.running:
                    errors.append(f"{i.name}: running batch not empty ({b.n} requests)")
                if i.pq_count or i.pq_tokens or i.prealloc_q or i.ready_q:
                    errors.append(f"{i.name}: queues not empty")
                if i.holding or i.limbo:
                    errors.append(f"{i.name}: {len(i.holding)} requests still held, {len(i.limbo)} in limbo")
                if i.buffer is not None and any(v > 1e-6 for v in i.buffer.used.values()):
                    errors.append(f"{i.name}: receive buffer holds {i.buffer.used}")
            # a background tier write may outlive the last request (the run ends with it); any
            # other flow left is a transfer a request lost
            leaked = [f for f in self.fabric.flows.values() if f.on_done is not background_write_done]
            if leaked:
                errors.append(f"{len(leaked)} flows still on the fabric")
        if errors:
            raise RuntimeError("conservation broken in " + self.resolved.name + ": " + "; ".join(errors))

    def _record(self, wall: float) -> RunRecord:
        """The run's plain arrays (see record.py): no simulation object survives the run."""
        cols = self.ledger.cols
        if self.egress_s:  # every token reaches the client egress_s after its engine emits it
            for c in ("first_token_s", "finish_s"):
                cols[c] = cols[c] + self.egress_s
        infos = [InstanceInfo(i.name, i.role, i.gpus, i.pool.capacity, i.pool.peak, i.busy_time, i.tokens_out,
                              i.retractions) for i in self.instances]
        steps = [i.steps.columns() for i in self.instances]
        tokens = StepTokens(*self.ledger.segments(), DecodeEnds([self._decode_ends(i, st) for i, st in zip(self.instances, steps)]))
        tier_usage = []
        for inst in self.instances:
            if inst.tier_log and inst.cache is not None:
                t = np.asarray([x[0] for x in inst.tier_log])
                used = np.asarray([x[1] for x in inst.tier_log])
                for j, tier in enumerate(inst.cache.tiers.tiers):
                    tier_usage.append((tier.name, tier.capacity, t, used[:, j]))
        link_names = sorted(self.fabric.capacity)
        # the fabric's codes (first use) -> positions in the sorted link names
        remap = np.zeros(max(len(self.fabric.link_codes), 1), dtype=np.int32)
        index = {k: j for j, k in enumerate(link_names)}
        for name, c in self.fabric.link_codes.items():
            remap[c] = index[name]
        link_usage = self.fabric.usage_log.columns()
        link_usage["link"] = remap[link_usage["link"]]
        caches = [i.cache for i in self.instances if i.cache is not None]
        stats = {"tiers": [t.stats() for t in self._all_tiers()],
                 "caches": {i.name: {"lookup_tokens": i.cache.lookup_tokens, "hit_tokens": i.cache.hit_tokens,
                                     "evicted_blocks": i.cache.evicted_blocks}
                            for i in self.instances if i.cache is not None},
                 "buffers": {i.name: i.buffer.stats() for i in self.instances if i.buffer is not None},
                 "block_tokens": caches[0].block_tokens if caches else 0,
                 "events": [{"time_s": t, "kind": k, "what": w, "detail": d} for t, k, w, d in self.events],
                 "retries_by_cause": dict(self.retry_causes),
                 "capacity_gpus": [(t, g) for t, g in self.capacity_log],
                 "gpu_hours": self._gpu_hours(self.capacity_log),
                 "allocated_gpu_hours": self._gpu_hours(self.alloc_log),
                 "allocated_gpus": [(t, g) for t, g in self.alloc_log]}
        sc = self.resolved.scenario
        gpus = sum(i.gpus for i in self.instances) + (self.experts.gpus if self.experts else 0)
        slo = {k: getattr(sc.slo, k) for k in ("ttft_ms", "itl_ms", "max_itl_ms", "tpot_ms", "e2e_ms")}
        meta = {"source": self.resolved.source, "description": sc.description, "hardware": self.hw.name,
                "model": self.model.name, "seed": sc.seed}
        return RunRecord(sc.name, "simulated", cols, tokens, infos, gpus, gpus / self.hw.gpus_per_node, slo,
                         self.env.now, wall, sum(len(i.steps) for i in self.instances), self.disaggregated, steps,
                         tier_usage, link_usage, link_names, dict(self.fabric.capacity), stats, meta)

    def _decode_ends(self, inst: Instance, steps: dict[str, np.ndarray]) -> tuple:
        """How to read ``inst``'s decode-step end times from its step log (record.DecodeEnds:
        start + duration of each logged step with a decode batch, but those a failure cut
        short; the engine computed each end as exactly that sum, clock.py), checked here
        against the decode steps it ran."""
        cut = tuple(inst.cut_steps)
        n = int(DecodeEnds.done_mask(steps, self.env.now, cut).sum())
        if n != inst.batch.step:  # pragma: no cover - a bookkeeping bug, never a user error
            raise RuntimeError(f"{inst.name}: {n} decode-step ends for {inst.batch.step} decode steps")
        return steps, self.env.now, cut, self.egress_s

    def _gpu_hours(self, log) -> float:
        """GPU-hours of a (time, GPUs) log up to the end of the run."""
        total, (t0, g0) = 0.0, log[0]
        for t, g in log[1:]:
            total += g0 * (t - t0)
            t0, g0 = t, g
        total += g0 * (self.env.now - t0)
        return total / 3600.0

    def _all_tiers(self):
        seen, out = set(), []
        for st in self.builder.tier_stacks:
            for t in st.tiers:
                if id(t) not in seen:
                    seen.add(id(t))
                    out.append(t)
        return out


def _ids(h) -> list[int]:
    """A request's block ids as a list of Python ints."""
    return h.tolist() if isinstance(h, np.ndarray) else [int(x) for x in h]
