"""Mooncake transfer engine as SGLang uses it for P/D: D pre-allocates, then P writes.

Protocol (SGLang ``disaggregation/``): the router sends the request to both; D's prealloc
queue allocates the prompt's KV pages (waiting while its pool is full); P prefills; when both
are ready P writes the KV into D's pages (RDMA, one transfer per request when batched) and
frees its own copy; D admits the request to its running batch.
"""
from __future__ import annotations

from ...costs.transfer import transfer_plan
from .base import TRANSPORTS, Transport


@TRANSPORTS.register("mooncake")
class Mooncake(Transport):
    def routed(self, req, p, d) -> None:
        d.enqueue_prealloc(req)
        p.enqueue_prefill(req)

    def kv_allocated(self, req, d) -> None:
        req.d_ready = True
        if req.prefill_ready:
            self.start(req)

    def prefill_done(self, req, p) -> None:
        req.prefill_ready = True
        if req.d_ready:
            self.start(req)

    def plan(self, req, pair):
        return transfer_plan(pair.model, pair.hw, self.spec, req.input_len, pair.p_attn_tp, pair.page,
                             pair.kv_cache_dtype, pair.calibrated)

    def start(self, req) -> None:
        p, d = self.ctx.instance(req.p_inst), self.ctx.instance(req.d_inst)
        pair = self.ctx.pair(p, d)
        req.transfer_start = self.env.now
        plan = self.plan(req, pair)
        req.transfer_bytes = plan.nbytes
        cap = pair.flow_cap(plan.senders)
        self.send(req, p, d, plan.nbytes, plan.fixed_s, cap, lambda: self.done(req, p, d))

    def done(self, req, p, d) -> None:
        req.transfer_end = self.env.now
        p.release_prefill_kv(req)
        d.kv_arrived(req)
