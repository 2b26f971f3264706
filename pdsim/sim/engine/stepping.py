"""The engine loop of an instance (mixed into Instance, instance.py).

One SimPy process per instance, one event per engine step: form a batch, ask the executor for
the step's price, ``yield env.timeout(step)``, advance requests; decode-only steps with nothing
else scheduled meanwhile run back to back inline (``_quiet_decode``).
"""
from __future__ import annotations

import math

import simpy

from ..request import Request
from . import handoff_recompute, progress
from ..columns import CHUNK
from .lifecycle import DRAINING


def _never(_t: float) -> bool:
    return False  # a plain simpy.Environment: every step goes through the event queue


class Stepping:
    """The engine loop: steps, their prices, logs and what each step completes."""

    host_core = None  # the host core its CPU worker shares with other placed workers (sim/host_cores.py)
    host_extra = 0.0  # its unpinned processes busy while it steps (host.unpinned)
    host_pollers = 0.0  # its server's busy-waiting processes that weigh on other servers (host.pollers)
    host_poll_away = 1.0  # the share of their spinning on another server's core (host.poll_away)
    host_beside = 0.0  # busy processes it keeps on its own core while it steps (host.beside)
    _last_end = -math.inf  # when its previous step ended: its pollers' last read
    _core_job = None  # its step on that core, while one runs
    dispersion = None  # its steps' spread around their price (dispersion.py); None: each takes its price

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
        core = self.host_core
        disp = self.dispersion
        quiet = (decode_role and tiers is None and hasattr(env, "quiet_until")
                 and getattr(self.executor, "pure", False) and core is None and disp is None)
        while True:
            try:
                if (quiet and b.n and not (self.prealloc_q or self.ready_q or self.pq_tokens or self.remote_loads)
                        and self._quiet_decode()):
                    # the quiet run started the step that could not run inline: its end is an event
                    n, batch, start, dur = b.n, None, self._step_start, self._step_dur
                else:
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
                        if n and need:  # as in _quiet_decode: a step needing no page skips the call
                            self.pool.alloc(need)
                    if not pf_tokens and not n and not self.tail_joins:
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
                    if n and pf_tokens and self.mixed and self.whole_seq_attention:
                        # SGLang mixes the decodes in as one-token extends (ForwardMode.MIXED), and its
                        # torch_native attention then spans each one's whole context (admission.chunk_pairs)
                        pf_attn += b.extend_pairs()
                    if self.dp > 1 and pf_tokens:
                        # DP attention: every rank steps together, the one with the most prefill sets it
                        dur = price(pf_tokens, pf_attn, pf_seqs, n, ctx, rank_tokens=self.rank_max + n * self.q / self.dp)
                    else:
                        dur = price(pf_tokens, pf_attn, pf_seqs, n, ctx)
                    if disp is not None:  # this step's phase of the host's slow and fast ones
                        dur *= disp.factor(dur)
                    start = env.now
                    hold = 0.0
                    if self.load_until > start:
                        hold = self.load_until - start
                        dur += hold  # synchronous KV loads hold this step
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
                if core is not None:  # on a shared core: done when its work is, at the core's share
                    joins = self.tail_joins
                    if hold and not (joins or self.read_on_core):  # the load is a wait, not work on the core
                        yield env.timeout(hold)
                        work = dur - hold
                    else:  # a D's file read and tail forward (shared storage): the worker's own CPU
                        work = dur
                    self.read_on_core = False
                    poll = self.host_pollers and core.host.poll_weight(self.host_pollers, env.now - self._last_end,
                                                                       work)
                    self._core_job = core.run(work, self.host_extra, poll, self.host_poll_away, self,
                                              self.host_beside)
                    yield self._core_job.done
                    self._core_job = None
                    self._last_end = env.now
                    took = env.now - start
                    log_dur[-1] = took
                    self.busy_time += took - dur
                elif not skip_to(start + dur):  # nothing else happens before the step ends (clock.py)
                    yield env.timeout(dur)
                self._step_start = -1.0
                self._dec_step = 0
                if n:  # _after_decode, inlined (every decode step not run quietly)
                    k = n - self._removed_in_step
                    self.tokens_out += k
                    if self.ratio > self.ratio_min:
                        self.ratio = max(self.ratio_min, self.ratio - self.ratio_decay)
                    b.advance(k, env.now, self._leave_and_finish)
                if self.tail_joins:  # after the step's own decodes advanced: they were not in it
                    self._tail_joined()
                if batch:
                    self._after_prefill(batch)
                    if self.block_on_send and self.sending:
                        self._sent = env.event()  # P2P NCCL PUT: wait until this step's KV is sent
                        yield self._sent
                        self._sent = None
            except simpy.Interrupt:
                # failed (fail()): the step in flight never completes; wait for the restart
                if self._core_job is not None:
                    core.cancel(self._core_job)
                    self._core_job = None
                if self._step_start >= 0:
                    self.cut_steps.append(len(log) - 1)
                    cut = env.now - self._step_start
                    log_dur[-1] = cut
                    self.busy_time -= self._step_dur - cut
                    self._step_start = -1.0
                self._sent = None
                self._loads_in = None
                self.tail_joins = []  # taken with the rest (failover.py _drain_all)
                self.read_on_core = False
                self._sleeping = False
                self._dec_step = 0
                yield self._up

    def _tail_joined(self) -> None:
        """The step that computed the prompts' tails is over: their first tokens leave now and they
        join the batch (admission.py _admit_ready)."""
        joins, self.tail_joins = self.tail_joins, []
        for req in joins:
            if self.holding.pop(req.rid, None) is None:
                continue  # taken meanwhile (given up elsewhere)
            req.first_token = self.env.now
            self.ports.first_token(req)
            self._start_decoding(req, req.ctx0)

    def _quiet_decode(self) -> bool:
        """Run decode-only steps back to back, inline, while each would end before the next
        scheduled event of the whole simulation: then nothing else can run, observe or change
        anything meanwhile, and the steps are exactly what the engine loop would do one event
        at a time (same batch, pages, prices, logs, clock), only without the event queue.

        The first step that cannot run inline (one in which a request finishes: its finish
        reaches the world; one that would end at or after the next event or past the horizon)
        is started here as the loop would start it (pages, log row, ``_step_start`` and
        ``_step_dur``) and True returned: the loop waits for its end. False, with nothing
        started, for a step held by a KV load or needing more pages than are free (eviction or
        retraction): the loop forms that one. The caller has checked that nothing waits to be
        admitted or prefilled."""
        env = self.env
        if self.load_until > env.now:
            return False  # held by a load: the loop's job
        b = self.batch
        # a step ending at or after ``stop`` cannot run inline: the next event comes first, or it
        # ends past the horizon (``end > horizon`` is ``end >= nextafter(horizon)``, one compare)
        stop = min(env.quiet_until(), math.nextafter(env.horizon, math.inf))
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
        if len(log_t) >= CHUNK:  # flushed before the rows are added (as the loop): the started
            log.flush()          # step's row stays staged, where a failure mid-step cuts it
        waiting = self.pq_count + len(self.prealloc_q) + len(self.ready_q)  # nothing joins meanwhile
        cached = self.cache.evictable_pages if self.cache is not None else 0  # no request leaves meanwhile
        now = start = env.now
        # the batch's and instance's counters kept in locals for the run, written back after it
        step0 = step = b.step
        sum_ctx, rem_out = b.sum_ctx, b.rem_out
        busy, ratio, ratio_min, decay = self.busy_time, self.ratio, self.ratio_min, self.ratio_decay
        grow = n if q == 1.0 else n * q  # context added per step
        started = False
        free, used, grows = pool.free, pool.used, []  # the pool's counters, allocated once after
        while True:
            # the step starts: pages for the tokens it writes (alloc's ``last_runs`` is only read
            # right after a prompt's allocation, so a step needing none skips the call), the log
            need = bucket[(-step) % page]
            if need:
                if need > free:
                    break  # eviction or retraction first: the loop's job
                free -= need
                used += need
                grows.append(need)
            if price is None:
                dur = base + per_ctx * (sum_ctx + grow)
            else:
                dur = price(0, 0.0, 0, n, sum_ctx + grow)
            log_t.append(now)  # the constant columns are extended once the run is over
            log_dur.append(dur)
            log_kv.append(used)
            busy += dur
            end = now + dur
            if end >= stop or first_out <= step:
                started = True  # an event comes first, or a request finishes in it (or a stale entry)
                break
            # ... and ends: as _after_decode and DecodeBatch.advance, no request leaving
            now = end
            step += 1
            sum_ctx += grow
        steps = step - step0
        rows = steps + started
        if rows:
            pool.alloc_each(grows)
            log_pf.extend([0] * rows)
            log_dec.extend([n] * rows)
            log_queue.extend([waiting] * rows)
            log_cached.extend([cached] * rows)
            self.busy_time = busy
        if steps:
            if q == 1.0:
                rem_out -= n * steps
            for _ in range(steps):  # the reserve ratio's decay, step by step (as _after_decode)
                if ratio <= ratio_min:
                    break
                ratio = max(ratio_min, ratio - decay)
            b.step, b.sum_ctx, b.rem_out = step, sum_ctx, rem_out
            self.ratio = ratio
            self.tokens_out += n * steps
        if now != start:
            env.jump_to(now)
        if started:  # as the loop's step start
            self._step_start, self._step_dur = now, dur
            self._dec_step, self._removed_in_step = n, 0
        return started

    def _after_decode(self, n: int) -> None:
        self.tokens_out += n
        if self.ratio > self.ratio_min:
            self.ratio = max(self.ratio_min, self.ratio - self.ratio_decay)
        self.batch.advance(n, self.env.now, self._leave_and_finish)

    def _leave_and_finish(self, req: Request, step: int) -> None:
        """``req``'s last token came out in decode step ``step``: it leaves the batch (``_leave``,
        inlined: every request ends here) and is finished."""
        if step >= req.admit_step:
            req.segments.append((self.iid, req.admit_step, step))
        self.batch.leave(req, step, req.shared_pages)
        self._finish(req)

    def _after_prefill(self, batch) -> None:
        now = self.env.now
        plen_of = self.recompute_ctx.get  # _prompt_len, inlined
        share = self.cache is not None and not self.share_at_schedule  # SGLang: a chunk's blocks after its step
        for req, chunk, attempt in batch:
            if attempt != req.retries or req.done:
                continue  # given up while the step ran (a failure elsewhere): already taken off
            req.prefilled += chunk
            self.pq_tokens -= chunk
            if req.prefilled >= plen_of(req.rid, req.input_len):
                q = self.pq[req.dp_rank]
                q.remove(req) if q[0] is not req else q.popleft()
                self.pq_count -= 1
                self._prefill_complete(req, now)
            elif share:
                self._share_prefix(req, req.prefilled)

    def _prefill_complete(self, req: Request, now: float) -> None:
        if self.d_prefills and handoff_recompute.complete(self, req, now):
            return  # a hand-off D computed in chunks (handoff_recompute.py)
        recompute = self.recompute_ctx.pop(req.rid, None)
        if self.cache is not None and recompute is None:
            self._share_prefix(req)
        if self.role == "prefill":
            req.prefill_end = now
            self.holding[req.rid] = req  # until its KV has left
            self.ports.prefill_done(req, self)
            return
        if recompute is None:
            req.prefill_end = now
            if math.isnan(req.first_token):
                req.first_token = now  # the last prefill chunk samples the first token
                self.ports.first_token(req)
        # KV pages for the prompt were allocated at the first chunk; join the batch next step
        req.ctx0 = recompute if recompute is not None else req.input_len
        self.ready_q.append(req)
