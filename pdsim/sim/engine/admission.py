"""KV pages and admission of an instance (mixed into Instance, instance.py).

Which requests hold pages, how many they reserve for the tokens still to come (SGLang's
new-token ratio), pre-allocation on decode, admission of arrived KV, retraction when pages run
out, and the formation of a chunked-prefill batch under a token budget.
"""
from __future__ import annotations

import math
from collections import deque

from ..kv.pool import pages_for
from ..request import Request
from . import handoff_recompute, progress


def chunk_pairs(prefilled: int, chunk: int, whole_seq: bool) -> float:
    """Attention (query, key) pairs of a prefill chunk of ``chunk`` tokens after ``prefilled``
    (causal): its own rows over the keys before them, or, where the attention's query spans the
    whole sequence (SGLang's torch_native: one SDPA per sequence over prefix and chunk, the new rows
    kept), the whole causal square of ``prefilled + chunk`` tokens."""
    if whole_seq:
        n = prefilled + chunk
        return n * n / 2.0
    return chunk * (prefilled + chunk / 2.0)


class Admission:
    """Pages, reserves, admission, retraction and prefill batch formation."""

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
        self.d_prefills.discard(rid)
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

    def _reserve_pages(self) -> int:
        return int(self.ratio * self.batch.rem_out) // self.page

    def _prealloc(self) -> None:
        """Decode side: allocate KV for routed requests, FIFO, keeping a reserve for growth."""
        q = self.prealloc_q
        pool = self.pool
        while q:
            req = q[0]
            need = pages_for(req.input_len + (self._reserve_extra(req) if self.q != 1.0 else 0), self.page)
            reserve = self._reserve_pages()
            if self.recompute_ctx:  # retracted requests wait: the full-context reserve
                reserve = progress.full_context_reserve(self, req, req.input_len, reserve)
            if pool.free - reserve < need or not pool.alloc(need):
                break
            q.popleft()
            req.d_pages = need
            req.d_runs = pool.last_runs
            req.d_alloc = self.env.now
            self.holding[req.rid] = req
            self.ports.kv_allocated(req, self)

    def _admit_ready(self) -> None:
        q = self.ready_q
        # tails join at their step's end, hand-offs computed in chunks at their last one: both count
        while q and self.batch.n + len(self.tail_joins) + len(self.d_prefills) < self.max_running:
            req = q[0]
            lag = 0.0
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
                own = self.buffer.d_tail_tokens(req)
                if own > handoff_recompute.prefill_room(self):
                    # more than the step's prefill budget: chunked prefill of D's engine
                    read = self.buffer.take(req.transfer_bytes, req.buffer_where)
                    req.buffer_where = None
                    q.popleft()
                    handoff_recompute.start(self, req, own, read)
                    continue
                # a D that samples the first token itself computes the prompt's tail first (shared
                # storage, transports/shared_storage.py): its first token comes after the load and that
                tail = self.buffer.d_tail_s(req)
                load = self.buffer.take(req.transfer_bytes, req.buffer_where) + tail
                if tail:
                    lag = load
                req.buffer_where = None
                if load:
                    req.d_load_s = load
                    end = self.env.now + load
                    if tail and self.host_core is not None:
                        # one forward computes every tail admitted for it, one after another on the core
                        end = max(self.load_until, self.env.now) + load
                    if end > self.load_until:
                        self.load_until = end
            q.popleft()
            req.decode_admit = self.env.now
            if lag and self.host_core is not None and math.isnan(req.first_token):
                # on a placed CPU core the file read and the tail's forward are the worker's own CPU
                # work, in one forward with the batch's decodes: the step's end (at the core's share,
                # stepping.py) samples its first token; it decodes from the next step on. Held until
                # then, so a failure meanwhile finds it (failover.py _drain_all)
                self.holding[req.rid] = req
                self.tail_joins.append(req)
                continue
            if math.isnan(req.first_token):
                req.first_token = self.env.now + lag  # P's token streamed by D on admission, or D's own
                self.ports.first_token(req)
            self._start_decoding(req, req.ctx0)

    def _admit_holding_pages(self) -> None:
        """While the head waits for pages, admit queued requests that already hold theirs
        (recomputed after a retraction, pre-allocated): they free pages by finishing, and
        holding them behind the head would deadlock."""
        q = self.ready_q
        keep = deque()
        while q:
            req = q.popleft()
            if (req.buffer_where is None and req.d_pages > 0
                    and self.batch.n + len(self.tail_joins) + len(self.d_prefills) < self.max_running):
                req.decode_admit = self.env.now
                if math.isnan(req.first_token):
                    req.first_token = self.env.now
                    self.ports.first_token(req)
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
        # a one-token output on a D that computes the prompt's tail itself (shared storage) has its
        # first token ``lag`` after admission (_admit_ready): it cannot finish before that token
        now, first = self.env.now, req.first_token
        req.finish = first if first > now else now
        self.pool.release(req.d_pages)
        req.d_pages = 0
        if req.cache_keys:  # kv.unref: a decode instance's requests rarely hold cached blocks
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

    def _prompt_len(self, req: Request) -> int:
        return self.recompute_ctx.get(req.rid, req.input_len)

    def _admit_prompt(self, req: Request) -> bool:
        """Give a prompt about to start prefill its KV (kv/manager.py); False: no room yet."""
        recompute = req.rid in self.recompute_ctx
        plen = self.recompute_ctx[req.rid] if recompute else req.input_len  # _prompt_len
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

    def _share_prefix(self, req: Request, tokens: int | None = None) -> None:
        """Lend the full blocks of ``req``'s first ``tokens`` prompt tokens (None: all, its prefill
        done) to other prompts: while it is still prefilled in chunks (engine.prefix_share) a
        prompt sharing its prefix that arrives meanwhile hits them instead of computing them
        again. A recomputed context lends nothing. Needs the prefix cache."""
        if req.hash_ids is None or req.rid in self.recompute_ctx:
            return
        moved = self.kv.adopt_blocks(req, self.env.now, tokens)
        if moved:
            if self.role == "prefill":
                req.p_pages -= moved
            else:
                req.d_pages -= moved

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
        return self.executor.step_time(tokens, chunk_pairs(cached, tokens, self.whole_seq_attention), 1, 0, 0)

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
        plen_of = self.recompute_ctx.get  # _prompt_len, inlined: every prompt of every step
        share = self.share_at_schedule and cache is not None  # vLLM V1: blocks cached when scheduled
        whole_seq = self.whole_seq_attention
        for q in self.pq:
            if not q:
                continue  # an idle DP rank adds nothing (most of a wide instance's ranks, most steps)
            budget = per_rank_budget
            if self._chunk_hook:
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
                left = plen_of(req.rid, req.input_len) - req.prefilled
                chunk = left if left <= budget else budget
                if chunk <= 0:
                    continue
                batch.append((req, chunk, req.retries))
                if share:
                    self._share_prefix(req, req.prefilled + chunk)
                attn += chunk_pairs(req.prefilled, chunk, whole_seq)
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
