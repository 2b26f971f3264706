"""A serving instance (prefill, decode or colocated) running its engine loop.

One SimPy process per instance, one event per engine step: form a batch, ask the price,
``yield env.timeout(step)``, advance requests. Decode progress is O(1) per step: requests in
the running batch are not touched until they finish (a heap keyed by finish step), and the
batch's context sum and page growth are updated arithmetically.

Roles:
- ``prefill``: chunked prefill of routed requests; finished prompts go to the KV transfer.
- ``decode``: pre-allocates KV for routed requests (SGLang's prealloc queue), admits requests
  whose KV has arrived, runs continuous-batching decode; a request retracted for lack of KV
  is recomputed here (its context re-prefilled in mixed steps).
- ``colocated``: both; prefill chunks ride in decode batches (``enable_mixed_chunk``) or
  alternate with them (prefill first, as SGLang's default scheduler).
"""
from __future__ import annotations

import heapq
import math
from collections import deque
from typing import TYPE_CHECKING

from ..specs.scenario import GroupSpec
from .kvpool import KVPool, pages_for
from .prompt_kv import PromptKV
from .request import Request

if TYPE_CHECKING:  # pragma: no cover
    from .cluster import World


class Instance(PromptKV):
    def __init__(self, world: "World", iid: int, name: str, role: str, group: GroupSpec, cost,
                 kv_tokens: int, kv_bytes_per_token: float, nic_node: str):

        self.world = world
        self.env = world.env
        self.iid = iid
        self.name = name
        self.role = role
        self.group = group
        self.cost = cost
        self.nic_node = nic_node  # endpoint in the fabric graph
        eng = group.engine
        gpn = world.hw.gpus_per_node
        self.dp = group.dp
        self.gpus = group.gpus_per_instance(gpn)
        self.page = eng.page_size
        self.pool = KVPool(kv_tokens, eng.page_size, kv_bytes_per_token)
        self.rank_budget = eng.prefill_budget(self.dp)
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
        self.running: dict[int, Request] = {}
        self.heap: list[tuple[int, int, Request]] = []
        self.n_run = 0
        self.sum_ctx = 0
        self.rem_out = 0  # decode steps still owed to running requests (admission reserve)
        self.bucket = [0] * self.page
        self.dstep = 0  # decode steps run so far
        self.dstep_end: list[float] = []
        self.ratio = eng.init_new_token_ratio
        self.ratio_min = eng.min_new_token_ratio
        self.ratio_decay = (eng.init_new_token_ratio - eng.min_new_token_ratio) / eng.new_token_ratio_decay_steps
        self.ratio_init = eng.init_new_token_ratio
        # step log (timeline)
        self.log_t: list[float] = []
        self.log_dur: list[float] = []
        self.log_pf: list[int] = []
        self.log_dec: list[int] = []
        self.log_kv: list[int] = []
        self.log_queue: list[int] = []
        self.cache = None  # PrefixCache, set by the world when prefix caching applies
        self.buffer = None  # ReceiveBuffer of the P2P NCCL put modes (decode role)
        self.load_policy = "cheaper"
        self.block_on_send = False  # P2P NCCL PUT: the loop waits until its KV is sent
        self.sending = 0
        self._sent = None
        self.load_until = 0.0  # KV loads (offload tiers, host pool) hold the engine until then
        self.tier_log: list[tuple[float, tuple[float, ...]]] = []
        self.tokens_out = 0
        self.retractions = 0
        self.busy_time = 0.0
        self._wake = self.env.event()
        self._sleeping = False
        self.proc = self.env.process(self._loop())

    # ---- load signals for routers ------------------------------------------------------
    @property
    def outstanding_tokens(self) -> int:
        """Prompt tokens queued for prefill plus context tokens decoding or waiting to."""
        return self.pq_tokens + self.sum_ctx + self.rem_out + sum(r.input_len for r in self.prealloc_q)

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
        plen = self._prompt_len(req)
        if pages_for(plen, self.page) > self.pool.capacity:
            self.world.drop(req, f"prompt_exceeds_{self.role}_kv_capacity")
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
        if pages_for(req.input_len, self.page) > self.pool.capacity:
            self.world.drop(req, "prompt_exceeds_decode_kv_capacity")
            return
        self.prealloc_q.append(req)
        self.wake()

    def on_transferred(self, req: Request) -> None:
        req.ctx0 = req.input_len
        self.ready_q.append(req)
        self.wake()

    def release_prefill_kv(self, req: Request) -> None:
        """P frees a request's KV once it has left (transfer done); cached blocks stay."""
        self.pool.release(req.p_pages)
        req.p_pages = 0
        self._unref(req)
        self.wake()

    def recompute_lost(self, req: Request) -> None:
        """The KV never arrived (no room in any receive buffer): prefill it again here."""
        req.pf_admitted = False
        req.prefilled = 0
        req.recomputes += 1
        req.recompute_tokens += req.input_len
        self.recompute_ctx[req.rid] = req.input_len
        self.enqueue_prefill(req)

    # ---- admission -----------------------------------------------------------------------
    def _reserve_pages(self) -> int:
        return int(self.ratio * self.rem_out) // self.page

    def _prealloc(self) -> None:
        """Decode side: allocate KV for routed requests, FIFO, keeping a reserve for growth."""
        q = self.prealloc_q
        while q:
            req = q[0]
            need = pages_for(req.input_len, self.page)
            if self.pool.free - self._reserve_pages() < need or not self.pool.alloc(need):
                break
            q.popleft()
            req.d_pages = need
            req.d_alloc = self.env.now
            self.world.on_decode_allocated(req)

    def _admit_ready(self) -> None:
        q = self.ready_q
        while q and self.n_run < self.max_running:
            req = q[0]
            if req.buffer_where is not None:  # P2P NCCL put: KV waits in the receive buffer
                need = pages_for(req.ctx0, self.page)
                if self.pool.free - self._reserve_pages() < need:
                    self._admit_holding_pages()
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
            if req.buffer_where is None and req.d_pages > 0 and self.n_run < self.max_running:
                req.decode_admit = self.env.now
                if math.isnan(req.first_token):
                    req.first_token = self.env.now
                self._start_decoding(req, req.ctx0)
            else:
                keep.append(req)
        self.ready_q = keep

    def _start_decoding(self, req: Request, ctx: int) -> None:
        """Join the running batch with ``ctx`` tokens of KV; tokens so far are already out."""
        remaining = req.output_len - self._tokens_out_so_far(req)
        if remaining <= 0:
            self._finish(req)
            return
        s0 = self.dstep
        req.ctx0 = ctx
        req.admit_step = s0
        req.finish_step = s0 + remaining - 1
        self.running[req.rid] = req
        heapq.heappush(self.heap, (req.finish_step, req.rid, req))
        self.n_run += 1
        self.sum_ctx += ctx
        self.rem_out += remaining
        self.bucket[(ctx - s0) % self.page] += 1

    @staticmethod
    def _tokens_out_so_far(req: Request) -> int:
        n = 1 if not math.isnan(req.first_token) else 0
        for _iid, a, b in req.segments:
            n += b - a + 1
        return n

    def _leave_running(self, req: Request, last_step: int) -> int:
        """Remove from the batch after step ``last_step``; returns its context length then."""
        del self.running[req.rid]
        steps = last_step - req.admit_step + 1
        ctx = req.ctx0 + steps
        self.n_run -= 1
        self.sum_ctx -= ctx
        self.rem_out -= req.finish_step - last_step
        self.bucket[(req.ctx0 - req.admit_step) % self.page] -= 1
        if steps > 0:
            req.segments.append((self.iid, req.admit_step, last_step))
        req.d_pages = pages_for(ctx, self.page) - req.shared_pages
        return ctx

    def _finish(self, req: Request) -> None:
        req.finish = self.env.now
        self.pool.release(req.d_pages)
        req.d_pages = 0
        self._unref(req)
        self.world.on_finished(req)

    def _retract_for(self, pages_needed: int) -> None:
        """Free pages by retracting the most recently admitted requests (recompute later)."""
        while self.pool.free < pages_needed and self.running:
            rid = next(reversed(self.running))
            req = self.running[rid]
            ctx = self._leave_running(req, self.dstep - 1)
            req.finish_step = -1  # its heap entry is now stale
            self.pool.release(req.d_pages)
            req.d_pages = 0
            self._unref(req)
            req.pf_admitted = False
            req.preemptions += 1
            self.retractions += 1
            if req.preemptions > self.max_retractions:
                # thrashing: this request keeps losing its KV to others; give up on it rather
                # than recompute forever
                self.world.drop(req, "retracted_too_often")
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

    def _form_prefill(self, token_budget: int, slots: int):
        """Per DP rank, FCFS chunks within the rank budget. Returns (batch, tokens, attn, seqs)."""
        batch = []
        tokens = 0
        attn_max = 0.0
        per_rank_budget = min(self.rank_budget, token_budget) if self.dp == 1 else self.rank_budget
        for q in self.pq:
            budget = per_rank_budget
            attn = 0.0
            for req in q:
                if budget <= 0 or slots <= 0:
                    break
                if not req.pf_admitted and not self._admit_prompt(req):
                    break
                left = self._prompt_len(req) - req.prefilled
                chunk = left if left <= budget else budget
                if chunk <= 0:
                    continue
                batch.append((req, chunk))
                attn += chunk * (req.prefilled + chunk / 2.0)
                tokens += chunk
                budget -= chunk
                slots -= 1
                if chunk < left:
                    break  # the chunked request holds the rest of this rank's step
            if attn > attn_max:
                attn_max = attn
        return batch, tokens, attn_max * self.dp, len(batch)

    # ---- the engine loop -----------------------------------------------------------------
    def _loop(self):
        env = self.env
        cost = self.cost
        role = self.role
        decode_role = role != "prefill"
        while True:
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
            run_decode = decode_role and self.n_run > 0
            if has_prefill:
                if role == "prefill":
                    budget, slots = self.rank_budget * self.dp, self.max_running
                elif self.mixed or not run_decode or role == "decode":
                    budget = max(0, self.rank_budget * self.dp - (self.n_run if self.mixed else 0))
                    slots = self.max_running - self.n_run
                else:
                    budget, slots = self.rank_budget * self.dp, self.max_running - self.n_run
                if budget > 0 and slots > 0:
                    batch, pf_tokens, pf_attn, pf_seqs = self._form_prefill(budget, slots)
                if pf_tokens and role == "colocated" and not self.mixed:
                    run_decode = False  # SGLang default: a prefill batch pauses decoding
            n = self.n_run if run_decode else 0
            if n:
                need = self.bucket[(-self.dstep) % self.page]
                if need > self.pool.free and self.cache is not None:
                    self.cache.make_room(need, env.now)  # unreferenced cached blocks go first
                if need > self.pool.free:
                    self._retract_for(need)
                    if batch is None or not pf_tokens:
                        continue  # the freed pages may admit queued work: form the batch again
                    n = self.n_run
                    need = self.bucket[(-self.dstep) % self.page]
                if n:
                    self.pool.alloc(need)
            if not pf_tokens and not n:
                self._sleeping = True
                self._wake = env.event()
                yield self._wake
                continue
            ctx = self.sum_ctx + n if n else 0
            dur = cost.step_time(pf_tokens, pf_attn, pf_seqs, n, ctx)
            start = env.now
            if self.load_until > start:
                dur += self.load_until - start  # synchronous KV loads hold this step
            if self.cache is not None and self.cache.tiers is not None:
                self.tier_log.append((start, tuple(t.used for t in self.cache.tiers.tiers)))
            self.log_t.append(start)
            self.log_dur.append(dur)
            self.log_pf.append(pf_tokens)
            self.log_dec.append(n)
            self.log_kv.append(self.pool.used)
            self.log_queue.append(self.queue_len)
            self.busy_time += dur
            yield env.timeout(dur)
            if n:
                self._after_decode(n)
            if batch:
                self._after_prefill(batch)
                if self.block_on_send and self.sending:
                    self._sent = env.event()  # P2P NCCL PUT: wait until this step's KV is sent
                    yield self._sent
                    self._sent = None

    def _after_decode(self, n: int) -> None:
        step = self.dstep
        self.dstep = step + 1
        self.dstep_end.append(self.env.now)
        self.sum_ctx += n
        self.rem_out -= n
        self.tokens_out += n
        if self.ratio > self.ratio_min:
            self.ratio = max(self.ratio_min, self.ratio - self.ratio_decay)
        heap = self.heap
        while heap and heap[0][0] <= step:
            fstep, _rid, req = heapq.heappop(heap)
            if req.finish_step != fstep or req.rid not in self.running:
                continue  # stale entry of a retracted request
            self._leave_running(req, step)
            self._finish(req)

    def _after_prefill(self, batch) -> None:
        now = self.env.now
        for req, chunk in batch:
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
            self._adopt_blocks(req)
        if self.role == "prefill":
            req.prefill_end = now
            self.world.on_prefill_done(req)
            return
        if recompute is None:
            req.prefill_end = now
            if math.isnan(req.first_token):
                req.first_token = now  # the last prefill chunk samples the first token
        # KV pages for the prompt were allocated at the first chunk; join the batch next step
        req.ctx0 = recompute if recompute is not None else req.input_len
        self.ready_q.append(req)
