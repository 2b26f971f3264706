"""The world: one SimPy environment playing a request table through a built cluster.

``World(resolved, table).run()`` returns the run's ``RunRecord`` (record.py). The world owns
the clock, the arrivals (open or closed loop), the control plane (membership, router) and the
KV transport, and implements the instances' ports (ports.py). Simulated time only; the
progress callback is the single place wall time is read, and only for display.
"""
from __future__ import annotations

import math
import os
import time
from collections import deque
from typing import Callable

import numpy as np
import simpy

from ..costs.pd_overheads import pd_fixed_costs
from ..specs.scenario import ResolvedScenario
from ..workload.table import RequestTable
from .build import Builder, group_plans, pair_plan
from .control.membership import Membership
from .control.router import Hold, Reject, Route
from .engine.instance import Instance
from .net.fabric import Fabric
from .record import REQUEST_FLOAT, REQUEST_INT, InstanceInfo, RunRecord, StepTokens, empty_requests
from .request import Request
from .transports.base import TransportContext

# RunRecord request column -> Request attribute
_REQUEST_ATTR = {
    "request_id": "rid", "arrival_s": "arrival", "input_len": "input_len", "output_len": "output_len",
    "cached_tokens": "cached_tokens", "prefill_instance": "p_inst", "decode_instance": "d_inst",
    "routed_s": "routed", "prefill_start_s": "prefill_start", "prefill_end_s": "prefill_end",
    "transfer_start_s": "transfer_start", "transfer_end_s": "transfer_end", "decode_alloc_s": "d_alloc",
    "decode_admit_s": "decode_admit", "first_token_s": "first_token", "finish_s": "finish",
    "preemptions": "preemptions", "recompute_tokens": "recompute_tokens", "transfer_bytes": "transfer_bytes",
    "kv_load_s": "kv_load_s", "loaded_tokens": "loaded_tokens", "d_load_s": "d_load_s", "recomputes": "recomputes",
}


def default_plugins(resolved: ResolvedScenario) -> dict:
    """Plug-ins of a scenario resolved without them (registry keys only)."""
    from ..api import resolve_plugins  # the one place plug-ins are resolved

    return resolve_plugins(resolved.scenario, resolved.trust)


class World:
    def __init__(self, resolved: ResolvedScenario, table: RequestTable,
                 progress: Callable[[float, float, int, int], None] | None = None):
        sc = resolved.scenario
        self.resolved = resolved
        self.hw, self.model = resolved.hardware, resolved.model
        self.env = simpy.Environment()
        self.rng = np.random.default_rng(sc.seed)
        self.table = table
        self.progress = progress
        # conservation checks at the end of the run (tests set PDSIM_CHECK=1; see tests/conftest.py)
        self.check = os.environ.get("PDSIM_CHECK") == "1"
        self.duration_limit = sc.duration_limit_s
        self.n_finished = 0
        self.n_dropped = 0
        self.requests: list[Request] = []
        self.in_flight = 0
        self._cc_waiting: deque[int] = deque()
        self._held: list[Request] = []  # requests the router holds until membership changes
        fixed = pd_fixed_costs(sc.overheads) if sc.overheads is not None else None
        self.ingress_s = fixed.ingress_s if fixed else 0.0  # arrival -> the router has routed it
        self.egress_s = fixed.egress_s if fixed else 0.0  # a token leaves an engine -> the client has it
        plugins = resolved.plugins if "schedulers" in resolved.plugins else default_plugins(resolved)
        self.transport = plugins["transport"].create(spec=sc.transfer)
        self.plans = group_plans(resolved, self.transport)
        builder = Builder(resolved, self.env, self, table, plugins)
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
        self.env.process(self._client())

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
        for i in range(len(arrivals)):
            dt = arrivals[i] - env.now
            if dt > 0:
                yield env.timeout(dt)
            req = Request(i, arrivals[i], inputs[i], outputs[i], hashes[i] if hashes is not None else None)
            self.requests.append(req)
            if cc is not None and self.in_flight >= cc:
                self._cc_waiting.append(i)  # starts when a slot frees (closed loop)
                continue
            self._start(req)

    def _start(self, req: Request) -> None:
        self.in_flight += 1
        if req.input_len + req.output_len > self.model.max_context:
            self.dropped(req, "exceeds_model_max_context")
            return
        if self.ingress_s > 0:  # the request path to the router and the engines (HTTP, proxy)
            self.env.timeout(self.ingress_s).callbacks.append(lambda _e, r=req: self._routed(r))
            return
        self._routed(req)

    def _routed(self, req: Request) -> None:
        req.routed = self.env.now
        self._route(req)

    def _route(self, req: Request) -> None:
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
        self._release_slot()

    def dropped(self, req: Request, reason: str) -> None:
        if req.drop_reason is not None:
            return
        req.drop_reason = reason
        self.n_dropped += 1
        self._release_slot()

    def evicted(self, req: Request, inst: Instance, reason: str) -> None:
        self.dropped(req, reason)

    def _release_slot(self) -> None:
        self.in_flight -= 1
        if self._cc_waiting:
            req = self.requests[self._cc_waiting.popleft()]
            # a closed-loop client sends when a slot frees; latencies count from the send,
            # as bench_serving measures them under --max-concurrency
            req.arrival = self.env.now
            self._start(req)

    # ---- run ---------------------------------------------------------------------------------
    def run(self, chunk_s: float | None = None) -> RunRecord:
        env = self.env
        n = len(self.table)
        horizon = self.duration_limit
        wall0 = time.perf_counter()
        step = chunk_s or max(1.0, (self.table.duration_s or 60.0) / 50)
        while True:
            nxt = env.peek()
            if nxt == math.inf:
                break  # nothing left to happen (a stuck request is reported below)
            target = max(env.now + step, nxt)  # when idle, jump to the next event
            if horizon is not None:
                if nxt > horizon:
                    break  # the next event lies past the horizon: the clock would never reach it
                target = min(target, horizon)
            # step by hand: simpy's run(until=...) leaves its stop event queued, which would
            # hide an empty schedule (a stuck world) from peek()
            peek, stepper = env.peek, env.step
            while peek() <= target:
                stepper()
            if self.progress:
                self.progress(env.now, time.perf_counter() - wall0, self.n_finished + self.n_dropped, n)
            if self.n_finished + self.n_dropped >= n and len(self.requests) == n:
                break
            if horizon is not None and env.now >= horizon:
                break
        cut = horizon is not None and any(not r.done for r in self.requests) or len(self.requests) < n
        for req in self.requests:
            if not req.done:
                req.drop_reason = "unfinished_at_end" if horizon is not None else "stuck"
        for i in range(len(self.requests), n):  # arrivals after the horizon
            req = Request(i, float(self.table.arrival_s[i]), int(self.table.input_len[i]), int(self.table.output_len[i]))
            req.drop_reason = "not_arrived_by_end"
            self.requests.append(req)
        wall = time.perf_counter() - wall0
        if self.check:
            self._check_conservation(n, cut)
        return self._record(wall)

    def _check_conservation(self, n: int, cut: bool) -> None:
        """Test mode (PDSIM_CHECK=1): every request finished or dropped with a reason, and,
        unless the horizon cut the run, every page, queue, batch, buffer and flow empty."""
        errors = []
        if len(self.requests) != n:
            errors.append(f"{n - len(self.requests)} requests never created")
        undone = [r.rid for r in self.requests if not r.done]
        if undone:
            errors.append(f"requests neither finished nor dropped: {undone[:5]}")
        both = [r.rid for r in self.requests if r.drop_reason is not None and not math.isnan(r.finish)]
        if both:
            errors.append(f"requests both finished and dropped: {both[:5]}")
        stuck = [r.rid for r in self.requests if r.drop_reason == "stuck"]
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
                if i.buffer is not None and any(v > 1e-6 for v in i.buffer.used.values()):
                    errors.append(f"{i.name}: receive buffer holds {i.buffer.used}")
            if self.fabric.flows:
                errors.append(f"{len(self.fabric.flows)} flows still on the fabric")
        if errors:
            raise RuntimeError("conservation broken in " + self.resolved.name + ": " + "; ".join(errors))

    def _record(self, wall: float) -> RunRecord:
        """The run's plain arrays (see record.py): no simulation object survives the run."""
        reqs = self.requests
        n = len(reqs)
        cols = empty_requests(n)
        for name in REQUEST_FLOAT + REQUEST_INT:
            if name in _REQUEST_ATTR:
                cols[name] = np.asarray([getattr(r, _REQUEST_ATTR[name]) for r in reqs], dtype=cols[name].dtype)
        cols["drop_reason"] = np.asarray([r.drop_reason for r in reqs], dtype=object)
        order = np.argsort(cols["request_id"], kind="stable")
        if not np.array_equal(order, np.arange(n)):
            cols = {k: v[order] for k, v in cols.items()}
        if self.egress_s:  # every token reaches the client egress_s after its engine emits it
            for c in ("first_token_s", "finish_s"):
                cols[c] = cols[c] + self.egress_s
        seg = [(r.rid, iid, a, b) for r in reqs for iid, a, b in r.segments]
        seg.sort(key=lambda x: x[0])  # stable: a request's stretches stay in the order they ran
        sa = np.asarray(seg, dtype=np.int64).reshape(-1, 4)
        tokens = StepTokens(sa[:, 0], sa[:, 1], sa[:, 2], sa[:, 3],
                            [np.asarray(i.batch.step_end, dtype=np.float64) + self.egress_s for i in self.instances])
        infos = [InstanceInfo(i.name, i.role, i.gpus, i.pool.capacity, i.pool.peak, i.busy_time, i.tokens_out,
                              i.retractions) for i in self.instances]
        steps = [{"time_s": np.asarray(i.log_t, dtype=np.float64), "step_s": np.asarray(i.log_dur, dtype=np.float64),
                  "prefill_tokens": np.asarray(i.log_pf, dtype=np.int64), "running_batch": np.asarray(i.log_dec, dtype=np.int64),
                  "kv_used": np.asarray(i.log_kv, dtype=np.int64), "queue_depth": np.asarray(i.log_queue, dtype=np.int64)}
                 for i in self.instances]
        tier_usage = []
        for inst in self.instances:
            if inst.tier_log and inst.cache is not None:
                t = np.asarray([x[0] for x in inst.tier_log])
                used = np.asarray([x[1] for x in inst.tier_log])
                for j, tier in enumerate(inst.cache.tiers.tiers):
                    tier_usage.append((tier.name, tier.capacity, t, used[:, j]))
        link_names = sorted(self.fabric.capacity)
        code = {k: j for j, k in enumerate(link_names)}
        lu = self.fabric.usage_log
        link_usage = {"time_s": np.asarray([x[0] for x in lu], dtype=np.float64),
                      "link": np.asarray([code[x[1]] for x in lu], dtype=np.int64),
                      "bytes_per_s": np.asarray([x[2] for x in lu], dtype=np.float64),
                      "flows": np.asarray([x[3] for x in lu], dtype=np.int64)}
        caches = [i.cache for i in self.instances if i.cache is not None]
        stats = {"tiers": [t.stats() for t in self._all_tiers()],
                 "caches": {i.name: {"lookup_tokens": i.cache.lookup_tokens, "hit_tokens": i.cache.hit_tokens,
                                     "evicted_blocks": i.cache.evicted_blocks}
                            for i in self.instances if i.cache is not None},
                 "buffers": {i.name: i.buffer.stats() for i in self.instances if i.buffer is not None},
                 "block_tokens": caches[0].block_tokens if caches else 0}
        sc = self.resolved.scenario
        gpus = sum(i.gpus for i in self.instances)
        slo = {k: getattr(sc.slo, k) for k in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms")}
        meta = {"source": self.resolved.source, "description": sc.description, "hardware": self.hw.name,
                "model": self.model.name, "seed": sc.seed}
        return RunRecord(sc.name, "simulated", cols, tokens, infos, gpus, gpus / self.hw.gpus_per_node, slo,
                         self.env.now, wall, sum(len(i.log_t) for i in self.instances), self.disaggregated, steps,
                         tier_usage, link_usage, link_names, dict(self.fabric.capacity), stats, meta)

    def _all_tiers(self):
        seen, out = set(), []
        for st in self.builder.tier_stacks:
            for t in st.tiers:
                if id(t) not in seen:
                    seen.add(id(t))
                    out.append(t)
        return out
