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
from ..specs.scenario import ResolvedScenario
from ..workload.table import RequestTable
from .build import Builder, group_plans, pair_plan
from .clock import Clock, call_later
from ..costs.registry import resolve_cost_kind
from .control.autoscaler import AutoscaleController
from .control.faults import FaultController
from .experts import ExpertService
from .control.membership import Membership
from .control.router import Hold, Reject, Route
from .engine.instance import Instance
from .net.fabric import Fabric
from . import memory, settle
from .ledger import RequestLedger
from .record import RunRecord
from .request import Request
from .resolve import resolve_plugins
from .transports.base import TransportContext
from .elastic import Elastic
from .recovery import Recovery
from .accounting import Accounting
from .request_path import RequestPath

#: young-generation GC threshold while a world runs (Python's default is 700)
GC_GEN0 = 50_000
#: requests per part of the table whose arrival columns are held as Python numbers (2**16)
ARRIVAL_PART_BITS = 16
ARRIVAL_PART_MASK = (1 << ARRIVAL_PART_BITS) - 1


def default_plugins(resolved: ResolvedScenario) -> dict:
    """Plug-ins of a scenario resolved without them (registry keys only)."""
    return resolve_plugins(resolved.scenario, resolved.trust)


class World(RequestPath, Elastic, Recovery, Accounting):
    def __init__(self, resolved: ResolvedScenario, table: RequestTable,
                 progress: Callable[[float, float, int, int], None] | None = None):
        resolved = with_host_sharing(resolved)  # host work on shared cores (costs/host.py)
        sc = resolved.scenario
        self.resolved = resolved
        self.hw, self.model = resolved.hardware, resolved.model
        self.env = Clock(horizon=sc.duration_limit_s if sc.duration_limit_s is not None else math.inf)
        self.rng = np.random.default_rng(sc.seed)
        self.table = table
        self.n_requests = len(table)
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
        self.egress_extra: dict[int, float] = {}  # request id -> its way out's wait beyond egress_s (placed cores)
        self._hops_out: dict[int, tuple] = {}  # request id -> (its way-out hop still running, token time)
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
        self._setup_request_path(builder.host_cores, sc.cluster.disaggregated)
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
        self._start_arrivals()
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
    def _start_arrivals(self) -> None:
        """Play the table's arrivals as a chain of timeouts, one per distinct arrival time, whose
        callback (``_arrivals``) sends every request due then. The chain starts at time 0 ahead
        of that moment's ordinary events (an urgent event), where a SimPy process would start:
        the same events in the same order as a process yielding those timeouts, without a
        generator resumed per arrival."""
        self._next = 0  # the next request to send
        self._due = False  # the timeout that just fired is request ``_next``'s arrival
        self._part = -1  # which part of the table's columns ``_cols`` holds
        self._cols = None
        start = self.env.event()
        start.callbacks.append(self._arrivals)
        start._ok, start._value = True, None
        self.env.schedule(start, simpy.core.URGENT)

    def _arrivals(self, _ev=None) -> None:
        """Send every request due now; then wait for the next arrival time (``_start_arrivals``)."""
        t = self.table
        env = self.env
        n = self.n_requests
        hashes = t.hash_ids
        cc = t.max_concurrency
        i, due = self._next, self._due
        while i < n:
            if i >> ARRIVAL_PART_BITS != self._part:
                self._load_part(i >> ARRIVAL_PART_BITS)
            arrivals, inputs, outputs, prios = self._cols
            k = i & ARRIVAL_PART_MASK
            if not due:
                dt = arrivals[k] - env.now
                if dt > 0:
                    # the arrival is the timeout's end (``now + dt``), not recomputed once it fires
                    self._next, self._due = i, True
                    call_later(env, dt, self._arrivals)
                    return
            due = False
            # block ids as Python ints: the prefix cache hashes them at every lookup, and numpy
            # scalars hash several times slower
            if hashes is not None:
                h = hashes[i]
                ids = h.tolist() if type(h) is np.ndarray else _ids(h)
            else:
                ids = None
            req = Request(i, arrivals[k], inputs[k], outputs[k], ids)
            if prios is not None:
                req.priority = prios[k]
            self.live[i] = req
            self.created += 1
            i += 1
            if cc is not None and self.in_flight >= cc:
                self._cc_waiting.append(req.rid)  # starts when a slot frees (closed loop)
                continue
            self._start(req)
        self._next, self._due = n, False

    def _load_part(self, part: int) -> None:
        """The arrival columns of one part of the table as Python numbers (a whole 10M-request
        table as lists would hold ~100 B a request for the whole run)."""
        t = self.table
        sl = slice(part << ARRIVAL_PART_BITS, (part + 1) << ARRIVAL_PART_BITS)
        prio_col = t.priority if getattr(t, "priority", None) is not None else None
        self._cols = (t.arrival_s[sl].tolist(), t.input_len[sl].tolist(), t.output_len[sl].tolist(),
                      prio_col[sl].tolist() if prio_col is not None else None)
        self._part = part

    def _start(self, req: Request) -> None:
        self.in_flight += 1
        if req.input_len + req.output_len > self.model.max_context:
            self.dropped(req, "exceeds_model_max_context")
            return
        ingress = self.ingress_s  # HTTP, proxy, tokeniser
        if self.hw.efficiency.tokenize_ns:  # else prompts arrive as token ids: nothing to add
            ingress += tokenize_s(req.input_len, self.hw.efficiency)
        if ingress > 0:
            # with placed host cores the way in is CPU work sharing them (sim/host_cores.py hop),
            # else its idle-host time as a fixed delay
            done = self.front.hop(ingress).done if self.front is not None else self.env.timeout(ingress)
            done.callbacks.append(lambda _e, r=req: self._routed(r))
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
        if self.ledger.written == self.n_requests and not self._all_done.triggered:
            # the last request is done: the run ends now (after the events already due now),
            # not at whatever time the stepping loop happens to look
            self._all_done.callbacks.append(simpy.core.StopSimulation.callback)
            self._all_done.succeed()

    def evicted(self, req: Request, inst: Instance, reason: str) -> None:
        self._evict(req, reason)


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
                    env.run_until(target)  # while peek() <= target: stepper()
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


def _ids(h) -> list[int]:
    """A request's block ids as a list of Python ints."""
    return h.tolist() if isinstance(h, np.ndarray) else [int(x) for x in h]
