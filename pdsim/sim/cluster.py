"""The world: one SimPy environment holding clients, router, instances and the fabric.

``World(resolved, table).run()`` plays the request table through the cluster and returns a
``RunRecord`` of plain arrays (requests, per-instance step logs, link usage; record.py). Simulated time only;
the progress callback is the single place wall time is read, and only for display.
"""
from __future__ import annotations

import math
import os
import time
from collections import deque
from typing import Callable

import networkx as nx
import numpy as np
import simpy

from ..costs import build_step_cost
from ..costs.transfer import flow_cap, instance_nic_capacity, kv_bytes_moved, transfer_plan
from ..specs.errors import SpecError
from ..specs.memory import instance_memory, kv_dtype
from ..specs.scenario import ResolvedScenario
from ..workload.table import RequestTable
from .instance import Instance
from .kvpool import pages_for
from ..specs.catalog import load_storage
from ..specs.hardware import GIB
from .buffers import ReceiveBuffer
from .network import Fabric
from .prefix_cache import PrefixCache
from .record import REQUEST_FLOAT, REQUEST_INT, InstanceInfo, RunRecord, StepTokens, empty_requests
from .request import Request
from .router import ROUTERS
from .tiers import EVICTION, Tier, TierStack

SWITCH = "fabric"


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


def resolve_plugins_default(sc) -> dict:
    """Plug-ins of a scenario built without ``pdsim.resolve_scenario`` (registry keys only)."""
    out = {"router": ROUTERS.resolve(sc.router.policy, sc.router.params, "router.policy")}
    if sc.kv_offload is not None:
        out["eviction"] = EVICTION.resolve(sc.kv_offload.eviction, None, "kv_offload.eviction")
    return out


class World:
    def __init__(self, resolved: ResolvedScenario, table: RequestTable,
                 progress: Callable[[float, float, int, int], None] | None = None):
        sc = resolved.scenario
        self.resolved = resolved
        self.hw, self.model = resolved.hardware, resolved.model
        self.env = simpy.Environment()
        self.rng = np.random.default_rng(sc.seed)
        self._plugins = resolved.plugins or resolve_plugins_default(sc)
        self._eviction = self._plugins.get("eviction")
        self.table = table
        self.progress = progress
        # conservation checks at the end of the run (tests set PDSIM_CHECK=1; see tests/conftest.py)
        self.check = os.environ.get("PDSIM_CHECK") == "1"
        self.transfer = sc.transfer
        # fitted transfer constants follow the step-cost choice (roofline = first principles only)
        self.calibrated = sc.cost_model != "roofline" and bool(self.hw.calibration)
        self.duration_limit = sc.duration_limit_s
        self.finished = 0
        self.dropped = 0
        self.requests: list[Request] = []
        self.in_flight = 0
        self._cc_waiting: deque[int] = deque()
        graph = nx.Graph()
        graph.add_node(SWITCH)
        self.prefill: list[Instance] = []
        self.decode: list[Instance] = []
        self.colocated: list[Instance] = []
        self.instances: list[Instance] = []
        self.shared_tiers: dict[str, Tier] = {}
        self.tier_stacks: list[TierStack] = []
        nic_gbit = sc.transfer.nic_gbit
        for role, gi, g in sc.cluster.groups():
            mem = instance_memory(self.hw, self.model, g)
            kv_tokens = mem.kv_tokens
            if role == "decode" and sc.transfer.backend == "nccl" and sc.transfer.kv_buffer_fraction > 0:
                # the receive buffer is carved out of the decode KV pool (vLLM kv_buffer_size)
                buf = sc.transfer.kv_buffer_fraction * self.hw.gpu.hbm_bytes
                kv_tokens = max(0, int(kv_tokens - g.dp * buf / mem.kv_bytes_per_token_per_gpu))
            try:
                cost = build_step_cost(sc.cost_model, self.hw, self.model, g, role, nic_gbit=nic_gbit)
            except KeyError:
                raise SpecError(f"unknown cost model {sc.cost_model!r}", field="cost_model") from None
            kvb = self.model.kv_bytes_per_token(kv_dtype(self.model, g.engine.kv_cache_dtype))
            for k in range(g.count):
                iid = len(self.instances)
                label = g.name or f"{role[0].upper()}{gi}"
                name = f"{label}.{k}" if g.count > 1 or len(getattr(sc.cluster, role)) > 1 else f"{label}"
                node = f"inst{iid}"
                gpus = g.gpus_per_instance(self.hw.gpus_per_node)
                graph.add_edge(node, SWITCH, name=f"{name}.nic",
                               capacity=instance_nic_capacity(self.hw, gpus, nic_gbit))
                inst = Instance(self, iid, name, role, g, cost, kv_tokens, kvb, node)
                self._attach_memory(inst, role, gi, g, mem)
                self.instances.append(inst)
                getattr(self, role).append(inst)
        self.fabric = Fabric(self.env, graph)
        self.put_mode = sc.transfer.backend == "nccl" and sc.transfer.mode in ("put", "put_async")
        self.router = self._plugins["router"].create(rng=self.rng)
        self.disaggregated = sc.cluster.disaggregated
        self.env.process(self._client())

    # ---- KV memory hierarchy ---------------------------------------------------------------
    def _attach_memory(self, inst: Instance, role: str, gi: int, g, mem) -> None:
        """Prefix cache + offload tiers on prefill-capable instances; receive buffers on D."""
        sc = self.resolved.scenario
        hw = self.hw
        if role == "decode" and sc.transfer.backend == "nccl":
            gpu_buf = sc.transfer.kv_buffer_fraction * hw.gpu.hbm_bytes * inst.gpus
            host = sc.transfer.host_pool_gib * GIB
            inst.buffer = ReceiveBuffer(gpu_buf, host, hw.gpu.pcie_gbps * 1e9 * hw.efficiency.pcie)
        if role == "prefill" and sc.transfer.backend == "nccl" and sc.transfer.mode == "put":
            inst.block_on_send = True
        if role == "decode" or g.engine.disable_radix_cache or self.table.hash_ids is None:
            return
        off = sc.kv_offload
        block = (off.block_size if off is not None and off.block_size else None) or self.table.block_size
        if block % inst.page:
            raise SpecError(f"page_size {inst.page} must divide the prefix-cache block of {block} tokens "
                            "(or set disable_radix_cache: true)", source=self.resolved.source,
                            field=f"cluster.{role}[{gi}].engine.page_size")
        stack = None
        if off is not None:
            stack = self._tier_stack(inst, off, block, mem)
            inst.load_policy = off.load_policy
        inst.cache = PrefixCache(inst.pool, block, block // inst.page, stack,
                                 off.write_through if off is not None else False)

    def _tier_stack(self, inst: Instance, off, block: int, mem) -> TierStack:
        """Tiers sized and paced for this instance: host DRAM and local SSD per node (share of a
        node for sub-node instances), PCIe per GPU; a shared remote pool is one object."""
        devices = load_storage().devices
        gpn = self.hw.gpus_per_node
        nodes = inst.gpus / gpn
        policy = (self._eviction or EVICTION.resolve(off.eviction, None, "kv_offload.eviction")).create
        # LMCache keeps one copy of each block: MLA latents are identical on every TP rank, so
        # one rank's PCIe link carries them; GQA shards travel over every rank's link at once
        attn_tp = inst.group.world(gpn) // inst.dp
        block_bytes, links = kv_bytes_moved(self.model, block, attn_tp, inst.group.engine.kv_cache_dtype)
        links = min(links, inst.gpus)
        pcie_bps = links * self.hw.gpu.pcie_gbps * 1e9 * self.hw.efficiency.pcie
        tiers = []
        for t in off.tiers:
            dev = devices[t.device]
            cap = (t.capacity_gib if t.capacity_gib is not None else dev.capacity_gib) * GIB
            if dev.shared:
                if t.device not in self.shared_tiers:
                    self.shared_tiers[t.device] = Tier(t.device, dev, cap, policy())
                tiers.append(self.shared_tiers[t.device])
                continue
            # device figures are per node (DRAM bandwidth is per GPU's PCIe link); an explicit
            # capacity_gib in the scenario is per instance
            scale = links if dev.kind == "host_dram" else nodes
            tier = Tier(f"{inst.name}.{t.device}", dev, cap * nodes if t.capacity_gib is None else cap, policy())
            tier.read_bps *= scale
            tier.write_bps *= scale
            tiers.append(tier)
        for a, b in zip(tiers, tiers[1:]):
            a.next = b
        stack = TierStack(tiers, block_bytes, pcie_bps)
        self.tier_stacks.append(stack)
        return stack

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
            self.drop(req, "exceeds_model_max_context")
            return
        req.routed = self.env.now
        if self.disaggregated:
            p = self.router.pick_prefill(req, self.prefill)
            d = self.router.pick_decode(req, self.decode)
            req.p_inst, req.d_inst = p.iid, d.iid
            # every capacity check before anything is allocated: a request dropped later
            # would strand what P or D already holds for it
            reason = p.cannot_hold(req) or d.cannot_hold(req)
            if reason:
                self.drop(req, reason)
                return
            if not self.put_mode:  # GET / Mooncake: D pre-allocates, then the KV moves
                d.enqueue_prealloc(req)
            p.enqueue_prefill(req)
        else:
            inst = self.router.pick_prefill(req, self.colocated)
            req.p_inst = req.d_inst = inst.iid
            reason = inst.cannot_hold(req)
            if reason:
                self.drop(req, reason)
                return
            inst.enqueue_prefill(req)

    # ---- P/D handshake and KV transfer -----------------------------------------------------
    def on_decode_allocated(self, req: Request) -> None:
        req.d_ready = True
        if req.prefill_ready:
            self._start_transfer(req)

    def on_prefill_done(self, req: Request) -> None:
        req.prefill_ready = True
        if req.d_ready or self.put_mode:
            self._start_transfer(req)

    def _start_transfer(self, req: Request) -> None:
        p = self.instances[req.p_inst]
        d = self.instances[req.d_inst]
        req.transfer_start = self.env.now
        plan = transfer_plan(self.model, self.hw, self.transfer, req.input_len, p.group.world(self.hw.gpus_per_node)
                             // p.group.dp, p.page, p.group.engine.kv_cache_dtype, self.calibrated)
        req.transfer_bytes = plan.nbytes
        cap = flow_cap(self.hw, plan.senders, min(p.gpus, d.gpus), self.transfer.nic_gbit,
                       self.transfer.backend, self.calibrated)
        if self.put_mode:
            # P pushes into D's receive buffer: GPU buffer, else host pool, else it is lost
            req.buffer_where = d.buffer.reserve(plan.nbytes)
            p.sending += 1

        def send(_ev=None):
            self.fabric.send(p.nic_node, d.nic_node, plan.nbytes, cap, lambda _f: self._transfer_done(req))

        if plan.fixed_s > 0:
            self.env.timeout(plan.fixed_s).callbacks.append(send)
        else:
            send()

    def _transfer_done(self, req: Request) -> None:
        req.transfer_end = self.env.now
        p, d = self.instances[req.p_inst], self.instances[req.d_inst]
        p.release_prefill_kv(req)
        if self.put_mode:
            p.sending -= 1
            if p.sending == 0 and p._sent is not None and not p._sent.triggered:
                p._sent.succeed()
            if req.buffer_where is None:
                d.recompute_lost(req)
                return
            req.ctx0 = req.input_len
            d.ready_q.append(req)
            d.wake()
            return
        d.on_transferred(req)

    # ---- endings ---------------------------------------------------------------------------
    def on_finished(self, req: Request) -> None:
        self.finished += 1
        self._release_slot()

    def drop(self, req: Request, reason: str) -> None:
        if req.drop_reason is not None:
            return
        req.drop_reason = reason
        self.dropped += 1
        self._release_slot()

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
                self.progress(env.now, time.perf_counter() - wall0, self.finished + self.dropped, n)
            if self.finished + self.dropped >= n and len(self.requests) == n:
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
                if i.n_run or i.sum_ctx or i.rem_out or i.running:
                    errors.append(f"{i.name}: running batch not empty ({i.n_run} requests)")
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
                cols[name] = np.asarray([getattr(r, _REQUEST_ATTR[name]) for r in reqs],
                                        dtype=cols[name].dtype)
        cols["drop_reason"] = np.asarray([r.drop_reason for r in reqs], dtype=object)
        order = np.argsort(cols["request_id"], kind="stable")
        if not np.array_equal(order, np.arange(n)):
            cols = {k: v[order] for k, v in cols.items()}
        seg = [(r.rid, iid, a, b) for r in reqs for iid, a, b in r.segments]
        seg.sort(key=lambda x: x[0])  # stable: a request's stretches stay in the order they ran
        sa = np.asarray(seg, dtype=np.int64).reshape(-1, 4)
        tokens = StepTokens(sa[:, 0], sa[:, 1], sa[:, 2], sa[:, 3],
                            [np.asarray(i.dstep_end, dtype=np.float64) for i in self.instances])
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

    def _all_tiers(self) -> list[Tier]:
        seen, out = set(), []
        for st in self.tier_stacks:
            for t in st.tiers:
                if id(t) not in seen:
                    seen.add(id(t))
                    out.append(t)
        return out
