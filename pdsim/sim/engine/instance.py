"""A serving instance (prefill, decode or colocated) running its engine loop.

One SimPy process per instance, one event per engine step: form a batch, ask the executor
for the step's price, ``yield env.timeout(step)``, advance requests. Decode progress is O(1)
per step (decode_batch.py).

Roles:
- ``prefill``: chunked prefill of routed requests; finished prompts go to the KV transport.
- ``decode``: pre-allocates KV for routed requests (SGLang's prealloc queue), admits requests
  whose KV has arrived, runs continuous-batching decode; a request retracted for lack of KV
  is recomputed here (its context re-prefilled in mixed steps).
- ``colocated``: both; prefill chunks ride in decode batches (``enable_mixed_chunk``) or
  alternate with them (prefill first, as SGLang's default scheduler).

Lifecycle: ``starting`` -> ``up`` -> (``draining`` ->) ``down``. ``fail()`` interrupts the
engine process: the step in flight is lost, every request the instance holds is released and
handed back to the world (ports.evicted), and the instance is down until ``restart()``.
"""
from __future__ import annotations

import math
from collections import deque

import simpy

from ..kv.manager import KVManager
from ..kv.pool import pages_for
from ..request import Request
from ...costs.speculative import tokens_per_step
from . import progress
from .decode_batch import DecodeBatch
from ..columns import CHUNK, step_log

STARTING, UP, DRAINING, DOWN = "starting", "up", "draining", "down"


def _never(_t: float) -> bool:
    return False  # a plain simpy.Environment: every step goes through the event queue


class Instance:
    """``spec``: the build-time constants of its group (build.py GroupPlan); ``ports``: the
    world's callbacks (ports.py); ``executor``: prices a step (executor.py)."""

    def __init__(self, env: simpy.Environment, iid: int, name: str, role: str, plan, executor, kv: KVManager,
                 ports, nic_node: str, scheduler):
        self.env = env
        self.iid = iid
        self.name = name
        self.role = role
        self.plan = plan
        self.group = plan.group
        self.executor = executor
        self.ports = ports
        self.nic_node = nic_node  # endpoint in the fabric graph (its NICs)
        self.nvl_node: str | None = None  # its NVLink endpoint, when it shares a node with peers
        self.nodes: tuple[str, ...] = ()  # the nodes it occupies (build.Placement)
        self.scheduler = scheduler
        self._chunk_hook, self._retract_hook = scheduler.hooks() if hasattr(scheduler, "hooks") else (False, False)
        self.kv = kv
        self.pool = kv.pool
        self.cache = kv.cache
        eng = plan.group.engine
        self.dp = plan.dp
        self.gpus = plan.gpus
        self.page = eng.page_size
        self.rank_budget = plan.rank_budget
        mrr = eng.max_running_requests
        self.max_running = mrr if mrr is not None else 1 << 60
        self.mixed = eng.enable_mixed_chunk
        self.max_retractions = eng.max_retractions_per_request
        # prefill side
        self.pq: list[deque[Request]] = [deque() for _ in range(self.dp)]
        self.pq_tokens = 0  # prompt tokens waiting or in progress (router load signal)
        self.pq_count = 0  # requests in the prefill queues
        self._rr = 0
        self.recompute_ctx: dict[int, int] = {}  # rid -> context to re-prefill after a retraction
        # decode side
        self.prealloc_q: deque[Request] = deque()
        self.ready_q: deque[Request] = deque()
        spec = eng.speculative if role != "prefill" else None
        # speculative decoding: every decode step advances a sequence by the expected accept length
        self.q = tokens_per_step(spec) if spec is not None else 1.0
        self.batch = DecodeBatch(self.page, self.q)
        self.rank_max = 0
        # SGLang multiplies schedule_conservativeness by 0.3 under DP attention (server_args.py,
        # 0.4.7-0.5.x), so the reserve its defaults give is 0.3x the knobs' values there
        dp_factor = 0.3 if plan.group.enable_dp_attention else 1.0
        self.ratio = eng.init_new_token_ratio * dp_factor
        self.ratio_min = eng.min_new_token_ratio * dp_factor
        self.ratio_decay = (self.ratio - self.ratio_min) / eng.new_token_ratio_decay_steps
        self.ratio_init = self.ratio
        # step log (the record's per-step columns)
        self.steps = step_log()
        # steps a failure cut short: logged with the part that ran, they produced no tokens (the
        # record's token times are the ends of the other decode steps)
        self.cut_steps: list[int] = []
        self.tier_log: list[tuple[float, tuple[float, ...]]] = []
        self.buffer = None  # ReceiveBuffer of the P2P NCCL put modes (decode role; transports/nccl_p2p.py)
        self.block_on_send = False  # P2P NCCL PUT: the loop waits until its KV is sent
        self.sending = 0
        self._sent = None
        self.load_until = 0.0  # KV loads (offload tiers, host pool) hold the engine until then
        self.remote_loads = 0  # loads from remote storage in flight (fabric flows)
        self._remote_start: dict[int, float] = {}
        self._remote_reqs: list = []
        self._loads_in = None
        self.tokens_out = 0
        self.retractions = 0
        self.busy_time = 0.0
        self.state = UP
        self.epoch = 0  # bumped at every failure: callbacks of an earlier life are ignored
        self.holding: dict[int, Request] = {}  # pages held here while the KV is elsewhere or on its way
        self.limbo: list[Request] = []  # requests lost in this instance's failure, until it is detected
        self.detected = False  # its failure is known to the world (set by the world, cleared on restart)
        self._up = env.event()  # triggered by restart()
        self._step_start = self._step_dur = -1.0  # the step in flight, if any (for a failure mid-step)
        self._dec_step = self._removed_in_step = 0  # its decode batch; requests taken off meanwhile
        self._wake = env.event()
        self._sleeping = False
        self.decode_first = False  # prefill role: only prompts whose decode KV is allocated (progress.py)
        self.proc = env.process(self._loop())

    # ---- load signals for routers (read through control.membership views) -----------------
    @property
    def n_run(self) -> int:
        return self.batch.n

    @property
    def outstanding_tokens(self) -> int:
        """Prompt tokens queued for prefill plus context tokens decoding or waiting to."""
        b = self.batch
        return self.pq_tokens + b.sum_ctx + b.rem_out + sum(r.input_len for r in self.prealloc_q)

    @property
    def queue_len(self) -> int:
        """Requests waiting: for prefill (or recompute), for KV pre-allocation, for admission."""
        return self.pq_count + len(self.prealloc_q) + len(self.ready_q)

    # ---- entry points --------------------------------------------------------------------
    def wake(self) -> None:
        if self._sleeping:
            self._sleeping = False
            self._wake.succeed()

    def cannot_hold(self, req: Request) -> str | None:
        """Why this instance can never serve ``req`` (None if it can): its prompt, or for a
        decode-capable instance its whole context (prompt + output), exceeds the KV pool. Such
        a request would be retracted and recomputed forever."""
        if pages_for(req.input_len, self.page) > self.pool.capacity:
            return f"prompt_exceeds_{self.role}_kv_capacity"
        if self.role != "prefill" and pages_for(req.input_len + req.output_len, self.page) > self.pool.capacity:
            return f"context_exceeds_{self.role}_kv_capacity"
        return None

    def enqueue_prefill(self, req: Request, front: bool = False) -> None:
        if self.state == DOWN:  # a dead process takes the request with it until it is detected
            self._park(req)
            return
        plen = self._prompt_len(req)
        if pages_for(plen, self.page) > self.pool.capacity:
            self.ports.dropped(req, f"prompt_exceeds_{self.role}_kv_capacity")
            return
        if self.dp == 1:
            rank = 0
        else:  # SGLang's DP controller: round robin over attention DP ranks
            rank = self._rr
            self._rr = (self._rr + 1) % self.dp
        req.dp_rank = rank
        q = self.pq[rank]
        if front:
            # first in line, but behind prompts already being prefilled: they hold KV pages,
            # and blocking them behind a request that waits for pages would deadlock
            k = 0
            for r in q:
                if not r.pf_admitted:
                    break
                k += 1
            q.insert(k, req)
        else:
            q.append(req)
        self.pq_count += 1
        self.pq_tokens += plen - req.prefilled
        self.wake()

    def enqueue_prealloc(self, req: Request) -> None:
        if self.state == DOWN:
            self._park(req)
            return
        if pages_for(req.input_len, self.page) > self.pool.capacity:
            self.ports.dropped(req, "prompt_exceeds_decode_kv_capacity")
            return
        self.prealloc_q.append(req)
        self.wake()

    def kv_arrived(self, req: Request) -> None:
        """The prompt's KV is here (in pre-allocated pages, or a receive buffer): admit it."""
        if self.state == DOWN:
            self._park(req)
            return
        self.holding.pop(req.rid, None)
        req.ctx0 = req.input_len
        self.ready_q.append(req)
        self.wake()

    def release_prefill_kv(self, req: Request) -> None:
        """P frees a request's KV once it has left (transfer done); cached blocks stay."""
        if self.holding.pop(req.rid, None) is None:
            return  # not held here (this instance failed and restarted since)
        self.pool.release(req.p_pages)
        req.p_pages = 0
        self.kv.unref(req)
        self.wake()

    def recompute_lost(self, req: Request) -> None:
        """The KV never arrived (no room in any receive buffer): prefill it again here."""
        if self.state == DOWN:
            self._park(req)
            return
        req.pf_admitted = False
        req.prefilled = 0
        req.recomputes += 1
        req.recompute_tokens += req.input_len
        self.recompute_ctx[req.rid] = req.input_len
        self.enqueue_prefill(req)

    def send_started(self) -> None:
        self.sending += 1

    def send_finished(self) -> None:
        self.sending -= 1
        if self.sending == 0 and self._sent is not None and not self._sent.triggered:
            self._sent.succeed()

    # ---- lifecycle -----------------------------------------------------------------------
    def fail(self) -> list[Request]:
        """Go down now: the step in flight is lost, every page is freed and the HBM prefix cache
        is gone. Returns the requests the instance held (now in ``limbo``, lost until the
        failure is detected)."""
        if self.state == DOWN:
            return []
        self.state = DOWN
        self.epoch += 1
        held = self._drain_all()
        self.limbo.extend(held)
        if self.proc.is_alive and self.env.active_process is not self.proc:
            self.proc.interrupt("failed")
        return held

    def _park(self, req: Request) -> None:
        """A request handed to this instance while it is down is lost with it; once the failure
        is known (detected), it goes straight back to the world."""
        if req.done:
            return
        if req.buffer_where is not None and self.buffer is not None:  # its KV reached a dead receiver
            self.buffer.cancel(req.transfer_bytes, req.buffer_where)
            req.buffer_where = None
        if self.detected:
            self.ports.evicted(req, self, f"{self.role}_unreachable")
        elif req not in self.limbo:
            self.limbo.append(req)

    def restart(self) -> None:
        """Serve again (the world calls it once the restart time has passed)."""
        if self.state != DOWN:
            return
        self.state = UP
        self.detected = False
        self.ratio = self.ratio_init
        up, self._up = self._up, self.env.event()
        up.succeed()

    def abandon(self, req: Request) -> None:
        """Forget ``req`` (it failed elsewhere and is retried or dropped): its queue places,
        pages, cached-block references and batch slot are given back."""
        self._take(req)
        self.wake()

    def _take(self, req: Request) -> bool:
        """Remove every trace of ``req`` here; True if it was here."""
        found = False
        rid = req.rid
        q = self.pq[req.dp_rank] if req.dp_rank < len(self.pq) else None
        if q is not None and req in q:
            q.remove(req)
            self.pq_count -= 1
            self.pq_tokens -= self._prompt_len(req) - req.prefilled
            if req.pf_admitted:
                self._release_pages(req)
            found = True
        self.recompute_ctx.pop(rid, None)
        if req in self.prealloc_q:
            self.prealloc_q.remove(req)
            found = True
        if req in self.ready_q:
            self.ready_q.remove(req)
            if req.buffer_where is not None and self.buffer is not None:
                self.buffer.cancel(req.transfer_bytes, req.buffer_where)
                req.buffer_where = None
            self._release_pages(req)
            found = True
        b = self.batch
        if rid in b.running:
            if self._dec_step:  # it was in the decode step in flight: that step no longer counts it
                self._removed_in_step += 1
                if self.q == 1.0 and (req.ctx0 - req.admit_step) % self.page == (-b.step) % self.page:
                    self.pool.release(1)  # the page that step allocated for its next token
            self._leave(req, b.step - 1)
            req.finish_step = -1
            self._release_pages(req)
            found = True
        if self.holding.pop(rid, None) is not None:
            self._release_pages(req)
            found = True
        if req in self.limbo:
            self.limbo = [r for r in self.limbo if r is not req]
            found = True
        return found

    def _release_pages(self, req: Request) -> None:
        own = req.p_pages if self.role == "prefill" else req.d_pages
        if own:
            self.pool.release(own)
        if self.role == "prefill":
            req.p_pages = 0
        else:
            req.d_pages = 0
        if self.cache is not None:  # cached blocks are referenced where the prompt was prefilled
            self.kv.unref(req)

    def _drain_all(self) -> list[Request]:
        """Every request held here, each taken out with its pages (a failure)."""
        reqs = {}
        for q in self.pq:
            for r in q:
                reqs[r.rid] = r
        for r in list(self.prealloc_q) + list(self.ready_q) + list(self.batch.running.values()) + \
                list(self.holding.values()):
            reqs[r.rid] = r
        for r in reqs.values():
            self._take(r)
        if self.cache is not None:
            self.cache.clear()  # HBM is gone with the process
        # what is left is the step in flight's growth pages: the pool starts empty on restart
        self.pool.reset()
        self.remote_loads = 0
        self._remote_start.clear()
        self._remote_reqs.clear()
        self.sending = 0
        self.load_until = 0.0
        b = self.batch
        b.running.clear()
        b.heap.clear()
        b.n = b.sum_ctx = b.rem_out = 0
        b.bucket = [0] * self.page
        return list(reqs.values())

    # ---- admission -----------------------------------------------------------------------
    def _reserve_pages(self) -> int:
        return int(self.ratio * self.batch.rem_out) // self.page

    def _prealloc(self) -> None:
        """Decode side: allocate KV for routed requests, FIFO, keeping a reserve for growth."""
        q = self.prealloc_q
        while q:
            req = q[0]
            need = pages_for(req.input_len + self._reserve_extra(req), self.page)
            reserve = progress.full_context_reserve(self, req, req.input_len, self._reserve_pages())
            if self.pool.free - reserve < need or not self.pool.alloc(need):
                break
            q.popleft()
            req.d_pages = need
            req.d_runs = self.pool.last_runs
            req.d_alloc = self.env.now
            self.holding[req.rid] = req
            self.ports.kv_allocated(req, self)

    def _admit_ready(self) -> None:
        q = self.ready_q
        while q and self.batch.n < self.max_running:
            req = q[0]
            if req.buffer_where is not None:  # P2P NCCL put: KV waits in the receive buffer
                need = pages_for(req.ctx0 + self._reserve_extra(req), self.page)
                if self.pool.free - self._reserve_pages() < need:
                    free = self.pool.free
                    self._admit_holding_pages()
                    q = self.ready_q
                    if self.pool.free > free:
                        continue  # some finished on admission and freed pages: look at the head again
                    break
                self.pool.alloc(need)
                req.d_pages = need
                load = self.buffer.take(req.transfer_bytes, req.buffer_where)
                req.buffer_where = None
                if load:
                    req.d_load_s = load
                    end = self.env.now + load
                    if end > self.load_until:
                        self.load_until = end
            q.popleft()
            req.decode_admit = self.env.now
            if math.isnan(req.first_token):
                req.first_token = self.env.now  # P's token, streamed by D on admission
            self._start_decoding(req, req.ctx0)

    def _admit_holding_pages(self) -> None:
        """While the head waits for pages, admit queued requests that already hold theirs
        (recomputed after a retraction, pre-allocated): they free pages by finishing, and
        holding them behind the head would deadlock."""
        q = self.ready_q
        keep = deque()
        while q:
            req = q.popleft()
            if req.buffer_where is None and req.d_pages > 0 and self.batch.n < self.max_running:
                req.decode_admit = self.env.now
                if math.isnan(req.first_token):
                    req.first_token = self.env.now
                self._start_decoding(req, req.ctx0)
            else:
                keep.append(req)
        self.ready_q = keep

    def _start_decoding(self, req: Request, ctx: int) -> None:
        """Join the running batch with ``ctx`` tokens of KV; tokens so far are already out."""
        remaining = req.output_len - req.tokens_out()
        if remaining <= 0:
            self._finish(req)
            return
        self.batch.join(req, ctx, remaining)

    def _reserve_extra(self, req: Request) -> int:
        """Tokens of growth reserved with a request's KV: its whole remaining output under
        speculative decoding (drafts land several tokens a step, so page borders are not known
        in advance; SGLang reserves draft slots per step), else none."""
        if self.q == 1.0:
            return 0
        return max(0, req.output_len - req.tokens_out())

    def _leave(self, req: Request, last_step: int) -> int:
        steps = last_step - req.admit_step + 1
        if steps > 0:
            req.segments.append((self.iid, req.admit_step, last_step))
        return self.batch.leave(req, last_step, req.shared_pages)

    def _finish(self, req: Request) -> None:
        req.finish = self.env.now
        self.pool.release(req.d_pages)
        req.d_pages = 0
        self.kv.unref(req)
        self.ports.finished(req, self)

    def _retract_for(self, pages_needed: int) -> None:
        """Free pages by retracting the most recently admitted requests (recompute later)."""
        b = self.batch
        while self.pool.free < pages_needed and b.running:
            req = self.scheduler.retract_victim(b.running) if self._retract_hook else b.newest()
            if req.rid not in b.running:
                raise RuntimeError(f"{type(self.scheduler).__name__}.retract_victim returned a request "
                                   "that is not running")
            ctx = self._leave(req, b.step - 1)
            req.finish_step = -1  # its heap entry is now stale
            self.pool.release(req.d_pages)
            req.d_pages = 0
            self.kv.unref(req)
            req.pf_admitted = False
            req.preemptions += 1
            self.retractions += 1
            if req.preemptions > self.max_retractions:
                # thrashing: this request keeps losing its KV to others; give up on it rather
                # than recompute forever
                self.ports.dropped(req, "retracted_too_often")
                continue
            # recompute: the whole context is prefilled again on this instance, first in line
            req.prefilled = 0
            req.recompute_tokens += ctx
            self.recompute_ctx[req.rid] = ctx
            self.enqueue_prefill(req, front=True)
        self.ratio = self.ratio_init  # SGLang resets its reserve after a retraction

    # ---- batch formation -----------------------------------------------------------------
    def _prompt_len(self, req: Request) -> int:
        return self.recompute_ctx.get(req.rid, req.input_len)

    def _admit_prompt(self, req: Request) -> bool:
        """Give a prompt about to start prefill its KV (kv/manager.py); False: no room yet."""
        plen = self._prompt_len(req)
        recompute = req.rid in self.recompute_ctx
        # decode-capable instances keep a page of growth per running request on top of the
        # reserve; without it a retracted request re-admitted at once is retracted again
        headroom = self._reserve_pages() + self.batch.n if self.role != "prefill" else 0
        if self.role != "prefill":
            headroom = progress.full_context_reserve(self, req, plen, headroom)
        now = self.env.now
        extra = self._reserve_extra(req) if self.role != "prefill" else 0
        epoch = self.epoch
        g = self.kv.admit_prompt(req, plen, recompute, headroom, now, self._recompute_price, extra,
                                 lambda: self._remote_loaded(epoch))
        if g is None:
            return False
        if self.role == "prefill":
            req.p_pages = g.private_pages
        else:
            req.d_pages = g.private_pages
        if self.cache is not None and not recompute:
            if g.loaded_tokens:
                req.kv_load_s += g.load_s
                req.loaded_tokens = g.loaded_tokens
                if g.remote_loads:  # the next step waits for these flows (see _loop)
                    self.remote_loads += g.remote_loads
                    self._remote_start[req.rid] = now
                    self._remote_reqs.append(req)
                if now + g.load_s > self.load_until:
                    self.load_until = now + g.load_s
            req.cached_tokens = g.cached_tokens
            req.prefilled = g.cached_tokens
            self.pq_tokens -= g.cached_tokens
        if math.isnan(req.prefill_start):
            req.prefill_start = now
        req.pf_admitted = True
        return True

    def _remote_loaded(self, epoch: int) -> None:
        """A load from remote storage arrived; when the last one is in, the engine steps on."""
        if epoch != self.epoch:
            return  # a load for a life of this instance that has ended
        self.remote_loads -= 1
        if self.remote_loads == 0:
            now = self.env.now
            for r in self._remote_reqs:  # the wait is the requests' KV load time
                r.kv_load_s += now - self._remote_start.pop(r.rid)
            self._remote_reqs.clear()
            if self._loads_in is not None and not self._loads_in.triggered:
                self._loads_in.succeed()

    def _recompute_price(self, tokens: int, cached: int) -> float:
        return self.executor.step_time(tokens, tokens * (cached + tokens / 2.0), 1, 0, 0)

    def _form_prefill(self, token_budget: int, slots: int):
        """Per DP rank, chunks within the rank budget, in the scheduler's order. Returns
        (batch, tokens, attention pairs, sequences)."""
        batch = []
        tokens = 0
        attn_max = 0.0
        per_rank_budget = min(self.rank_budget, token_budget) if self.dp == 1 else self.rank_budget
        order = self.scheduler.order
        cache = self.cache
        rank_max = 0
        for q in self.pq:
            budget = per_rank_budget
            if self._chunk_hook and q:
                budget = self.scheduler.chunk_tokens(per_rank_budget, q, self.batch.n)
                if not (isinstance(budget, int) and 0 <= budget <= per_rank_budget):
                    raise RuntimeError(f"{type(self.scheduler).__name__}.chunk_tokens returned {budget!r}; "
                                       f"expected an int in [0, {per_rank_budget}] (the engine's budget)")
            attn = 0.0
            before = tokens
            for req in order(q, cache):
                if budget <= 0 or slots <= 0:
                    break
                if not req.pf_admitted:
                    if self.decode_first and not req.d_pages:
                        continue
                    if not self._admit_prompt(req):
                        break
                left = self._prompt_len(req) - req.prefilled
                chunk = left if left <= budget else budget
                if chunk <= 0:
                    continue
                batch.append((req, chunk, req.retries))
                attn += chunk * (req.prefilled + chunk / 2.0)
                tokens += chunk
                budget -= chunk
                slots -= 1
                if chunk < left:
                    break  # the chunked request holds the rest of this rank's step
            if attn > attn_max:
                attn_max = attn
            if tokens - before > rank_max:
                rank_max = tokens - before
        self.rank_max = rank_max  # prefill tokens of the busiest DP rank (it sets the step)
        return batch, tokens, attn_max * self.dp, len(batch)

    # ---- the engine loop -----------------------------------------------------------------
    def _loop(self):
        env = self.env
        skip_to = getattr(env, "skip_to", _never)
        price = self.executor.step_time
        role = self.role
        decode_role = role != "prefill"
        b = self.batch
        page = self.page
        log = self.steps
        log_t, log_dur, log_pf, log_dec, log_kv, log_queue, log_cached = log.lists
        pool = self.pool
        tiers = self.cache.tiers if self.cache is not None else None
        # decode-only steps may run inline between events (see _quiet_decode)
        quiet = (decode_role and tiers is None and hasattr(env, "quiet_until")
                 and getattr(self.executor, "pure", False))
        while True:
            try:
                if quiet and b.n and not (self.prealloc_q or self.ready_q or self.pq_tokens or self.remote_loads):
                    self._quiet_decode()
                if self.prealloc_q:
                    self._prealloc()
                if self.ready_q:
                    self._admit_ready()
                    if self.prealloc_q:
                        self._prealloc()  # requests that finished on admission freed their pages
                batch = None
                pf_tokens = 0
                pf_attn = 0.0
                pf_seqs = 0
                has_prefill = self.pq_tokens > 0
                run_decode = decode_role and b.n > 0
                if has_prefill:
                    if role == "prefill":
                        budget, slots = self.rank_budget * self.dp, self.max_running
                    elif self.mixed or not run_decode or role == "decode":
                        budget = max(0, self.rank_budget * self.dp - (b.n if self.mixed else 0))
                        slots = self.max_running - b.n
                    else:
                        budget, slots = self.rank_budget * self.dp, self.max_running - b.n
                    if budget > 0 and slots > 0:
                        batch, pf_tokens, pf_attn, pf_seqs = self._form_prefill(budget, slots)
                    if pf_tokens and role == "colocated" and not self.mixed:
                        run_decode = False  # SGLang default: a prefill batch pauses decoding
                if self.remote_loads:
                    # KV the step needs is still coming in from remote storage: wait for it, then form
                    # the step again (admitted prompts keep their pages; nothing else was taken yet)
                    self._loads_in = env.event()
                    yield self._loads_in
                    self._loads_in = None
                    continue
                n = b.n if run_decode else 0
                if n:
                    need = b.bucket[(-b.step) % page]  # b.pages_needed(), inlined: every decode step
                    if need > self.pool.free and self.cache is not None:
                        self.cache.make_room(need, env.now)  # unreferenced cached blocks go first
                    if need > self.pool.free:
                        self._retract_for(need)
                        if batch is None or not pf_tokens:
                            continue  # the freed pages may admit queued work: form the batch again
                        n = b.n
                        need = b.bucket[(-b.step) % page]
                    if n:
                        self.pool.alloc(need)
                if not pf_tokens and not n:
                    if self.decode_first and progress.decode_first_done(self):
                        continue
                    self.executor.idle()
                    if self.state == DRAINING and not (self.holding or self.ready_q or self.prealloc_q
                                                       or self.pq_count or b.n):
                        self.ports.drained(self)
                    self._sleeping = True
                    self._wake = env.event()
                    yield self._wake
                    continue
                gate = self.executor.gate
                if gate is not None:  # its remote experts are unavailable: wait (pages stay allocated)
                    yield gate
                ctx = (b.sum_ctx + (n if self.q == 1.0 else n * self.q)) if n else 0
                if self.dp > 1 and pf_tokens:
                    # DP attention: every rank steps together, the one with the most prefill sets it
                    dur = price(pf_tokens, pf_attn, pf_seqs, n, ctx, rank_tokens=self.rank_max + n * self.q / self.dp)
                else:
                    dur = price(pf_tokens, pf_attn, pf_seqs, n, ctx)
                start = env.now
                if self.load_until > start:
                    dur += self.load_until - start  # synchronous KV loads hold this step
                if tiers is not None:
                    self.tier_log.append((start, tuple(t.used for t in tiers.tiers)))
                if len(log_t) >= CHUNK:
                    log.flush()
                log_t.append(start)
                log_dur.append(dur)
                log_pf.append(pf_tokens)
                log_dec.append(n)
                log_kv.append(pool.used)
                log_queue.append(self.pq_count + len(self.prealloc_q) + len(self.ready_q))  # queue_len
                log_cached.append(self.cache.evictable_pages if self.cache is not None else 0)
                self.busy_time += dur
                self._step_start, self._step_dur = start, dur
                self._dec_step, self._removed_in_step = n, 0
                if not skip_to(start + dur):  # nothing else happens before the step ends (clock.py)
                    yield env.timeout(dur)
                self._step_start = -1.0
                self._dec_step = 0
                if n:
                    self._after_decode(n - self._removed_in_step)
                if batch:
                    self._after_prefill(batch)
                    if self.block_on_send and self.sending:
                        self._sent = env.event()  # P2P NCCL PUT: wait until this step's KV is sent
                        yield self._sent
                        self._sent = None
            except simpy.Interrupt:
                # failed (fail()): the step in flight never completes; wait for the restart
                if self._step_start >= 0:
                    self.cut_steps.append(len(log) - 1)
                    cut = env.now - self._step_start
                    log_dur[-1] = cut
                    self.busy_time -= self._step_dur - cut
                    self._step_start = -1.0
                self._sent = None
                self._loads_in = None
                self._sleeping = False
                self._dec_step = 0
                yield self._up

    def _quiet_decode(self) -> None:
        """Run decode-only steps back to back, inline, while each would end before the next
        scheduled event of the whole simulation: then nothing else can run, observe or change
        anything meanwhile, and the steps are exactly what the engine loop would do one event
        at a time (same batch, pages, prices, logs, clock), only without the event queue.

        Stops before a step in which a request finishes (its finish reaches the world), a step
        that needs more pages than are free (eviction or retraction), a step held by a KV load,
        or one that would end at or after the next event or past the horizon; the loop then
        takes over. The caller has checked that nothing waits to be admitted or prefilled."""
        env = self.env
        b = self.batch
        if self.load_until > env.now:
            return
        nxt = env.quiet_until()
        horizon = env.horizon
        pool, heap, bucket, page, q = self.pool, b.heap, b.bucket, self.page, self.q
        n = b.n
        ex = self.executor
        if getattr(ex, "linear", False):
            base, per_ctx = ex.decode_price(n)  # one batch shape throughout: priced once
            price = None
        else:
            price = ex.step_time
        first_out = heap[0][0] if heap else math.inf  # nobody joins or leaves meanwhile
        log = self.steps
        log_t, log_dur, log_pf, log_dec, log_kv, log_queue, log_cached = log.lists
        waiting = self.pq_count + len(self.prealloc_q) + len(self.ready_q)  # nothing joins meanwhile
        cached = self.cache.evictable_pages if self.cache is not None else 0  # no request leaves meanwhile
        now = start = env.now
        # the batch's and instance's counters kept in locals for the run, written back after it
        step, sum_ctx, rem_out = b.step, b.sum_ctx, b.rem_out
        busy, ratio, ratio_min, decay = self.busy_time, self.ratio, self.ratio_min, self.ratio_decay
        grow = n if q == 1.0 else n * q  # context added per step
        steps = 0
        while first_out > step:  # else a request finishes in this step (or a stale entry): the loop's job
            need = bucket[(-step) % page]
            if need > pool.free:
                break
            if price is None:
                dur = base + per_ctx * (sum_ctx + grow)
            else:
                dur = price(0, 0.0, 0, n, sum_ctx + grow)
            end = now + dur
            if end >= nxt or end > horizon:
                break
            # the step starts: pages for the tokens it writes (alloc's ``last_runs`` is only read
            # right after a prompt's allocation, so a step needing none skips the call), the log
            if need:
                pool.alloc(need)
            log_t.append(now)  # the constant columns are extended once the run is over
            log_dur.append(dur)
            log_kv.append(pool.used)
            busy += dur
            # ... and ends: as _after_decode and DecodeBatch.advance, no request leaving
            now = end
            steps += 1
            if ratio > ratio_min:
                ratio = max(ratio_min, ratio - decay)
            step += 1
            sum_ctx += grow
            if q == 1.0:
                rem_out -= n
        if steps:
            log_pf.extend([0] * steps)
            log_dec.extend([n] * steps)
            log_queue.extend([waiting] * steps)
            log_cached.extend([cached] * steps)
            if len(log_t) >= CHUNK:  # the run may overshoot a chunk: fine, chunks need not be equal
                log.flush()
            b.step, b.sum_ctx, b.rem_out = step, sum_ctx, rem_out
            self.busy_time, self.ratio = busy, ratio
            self.tokens_out += n * steps
        if now != start:
            env.jump_to(now)

    def _after_decode(self, n: int) -> None:
        self.tokens_out += n
        if self.ratio > self.ratio_min:
            self.ratio = max(self.ratio_min, self.ratio - self.ratio_decay)
        self.batch.advance(n, self.env.now, self._leave_and_finish)

    def _leave_and_finish(self, req: Request, step: int) -> None:
        self._leave(req, step)
        self._finish(req)

    def _after_prefill(self, batch) -> None:
        now = self.env.now
        for req, chunk, attempt in batch:
            if attempt != req.retries or req.done:
                continue  # given up while the step ran (a failure elsewhere): already taken off
            req.prefilled += chunk
            self.pq_tokens -= chunk
            if req.prefilled >= self._prompt_len(req):
                q = self.pq[req.dp_rank]
                q.remove(req) if q[0] is not req else q.popleft()
                self.pq_count -= 1
                self._prefill_complete(req, now)

    def _prefill_complete(self, req: Request, now: float) -> None:
        recompute = self.recompute_ctx.pop(req.rid, None)
        if self.cache is not None and recompute is None and req.hash_ids is not None:
            moved = self.kv.adopt_blocks(req, now)
            if self.role == "prefill":
                req.p_pages -= moved
            else:
                req.d_pages -= moved
        if self.role == "prefill":
            req.prefill_end = now
            self.holding[req.rid] = req  # until its KV has left
            self.ports.prefill_done(req, self)
            return
        if recompute is None:
            req.prefill_end = now
            if math.isnan(req.first_token):
                req.first_token = now  # the last prefill chunk samples the first token
        # KV pages for the prompt were allocated at the first chunk; join the batch next step
        req.ctx0 = recompute if recompute is not None else req.input_len
        self.ready_q.append(req)
