"""Mooncake transfer engine as SGLang uses it for P/D: D pre-allocates, then P writes.

Protocol (SGLang ``disaggregation/``): the router sends the request to both; D's prealloc
queue allocates the prompt's KV pages (waiting while its pool is full); P prefills; when both
are ready P writes the KV into D's pages (RDMA, one transfer per request when batched) and
frees its own copy; D admits the request to its running batch.
"""
from __future__ import annotations

from ...costs.pd_overheads import pd_fixed_costs
from ..kv.pool import kv_runs
from .base import TRANSPORTS, Transport


@TRANSPORTS.register("mooncake")
class Mooncake(Transport):
    def routed(self, req, p, d) -> None:
        d.enqueue_prealloc(req)
        p.enqueue_prefill(req)

    def kv_allocated(self, req, d) -> None:
        if self.ctx.overheads is not None:  # D's bootstrap handshake with P before KV may move
            p = self.ctx.instance(req.p_inst)
            first = (p.iid, d.iid) not in self._contacted
            self._contacted.add((p.iid, d.iid))
            boot = pd_fixed_costs(self.ctx.overheads, first_contact=first).bootstrap_s
            if boot > 0:
                attempt = req.retries
                self.env.timeout(boot).callbacks.append(lambda _e: self._d_ready(req, attempt))
                return
        self._d_ready(req, req.retries)

    def _d_ready(self, req, attempt: int) -> None:
        if req.retries != attempt or req.done:
            return  # given up meanwhile (a failure)
        req.d_ready = True
        if req.prefill_ready:
            self.start(req)

    def prefill_done(self, req, p) -> None:
        req.prefill_ready = True
        if req.d_ready:
            self.start(req)

    def bind(self, ctx) -> None:
        super().bind(ctx)
        self._contacted: set[tuple[int, int]] = set()

    def plan(self, req, pair):
        return pair.plan(self.spec, req.input_len, runs=kv_runs(req))

    def start(self, req) -> None:
        p, d = self.ctx.instance(req.p_inst), self.ctx.instance(req.d_inst)
        pair = self.ctx.pair(p, d)
        req.transfer_start = self.env.now
        plan = self.plan(req, pair)
        req.transfer_bytes = plan.nbytes
        cap = pair.flow_cap(plan.senders)
        self.send(req, p, d, plan.nbytes, plan.fixed_s, cap, lambda: self.done(req, p, d), plan.serial_s)

    def done(self, req, p, d) -> None:
        req.transfer_end = self.env.now
        p.release_prefill_kv(req)
        d.kv_arrived(req)
