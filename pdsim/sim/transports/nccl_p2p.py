"""vLLM's P2P NCCL connector (``P2pNcclConnector``): PUT, PUT_ASYNC and GET.

- PUT / PUT_ASYNC: P pushes each request's KV to D as soon as its prefill is done, into D's
  receive buffer (a GPU buffer of ``kv_buffer_size``, else vLLM's host tensor memory pool
  over PCIe, else the KV is lost and D recomputes the prompt). PUT blocks P's engine loop
  until the step's KV is sent; PUT_ASYNC sends from a background thread.
- GET: a pull. P prefills and keeps the KV in its memory; the request then reaches D, whose
  scheduler allocates the prompt's pages when it has room (its pre-allocation queue, FIFO) and
  only then asks P for the KV, which moves and frees P's copy. Unlike Mooncake, D reserves
  nothing while P prefills, and a busy D makes P hold KV longer.
Prices: one NCCL send per layer, each paying the point-to-point latency (costs/transfer.py).
"""
from __future__ import annotations

from ...specs.hardware import GIB
from .mooncake import Mooncake
from .base import TRANSPORTS
from .receive_buffer import ReceiveBuffer


@TRANSPORTS.register("nccl")
class P2PNccl(Mooncake):
    def __init__(self, params=None, spec=None):
        super().__init__(params, spec)
        self.push = spec is not None and spec.mode in ("put", "put_async")

    def setup_prefill(self, inst) -> None:
        inst.block_on_send = self.spec.mode == "put"

    def setup_decode(self, inst, plan) -> None:
        spec, hw = self.spec, plan.hw
        gpu_buf = spec.kv_buffer_fraction * hw.gpu.hbm_bytes * inst.gpus
        inst.buffer = ReceiveBuffer(gpu_buf, spec.host_pool_gib * GIB, hw.gpu.pcie_gbps * 1e9 * hw.efficiency.pcie)

    def decode_kv_tokens(self, kv_tokens: int, plan) -> int:
        frac = self.spec.kv_buffer_fraction
        if frac <= 0:
            return kv_tokens
        # the receive buffer is carved out of the decode KV pool (vLLM kv_buffer_size)
        buf = frac * plan.hw.gpu.hbm_bytes
        return max(0, int(kv_tokens - plan.dp * buf / plan.mem.kv_bytes_per_token_per_gpu))

    def routed(self, req, p, d) -> None:
        p.enqueue_prefill(req)  # D learns of the request when its KV is ready (push or pull)

    def prefill_done(self, req, p) -> None:
        req.prefill_ready = True
        if self.push:
            self.start(req)
        else:  # GET: D allocates when it has room, then pulls (kv_allocated -> start)
            self.ctx.instance(req.d_inst).enqueue_prealloc(req)

    def start(self, req) -> None:
        if not self.push:
            super().start(req)
            return
        p, d = self.ctx.instance(req.p_inst), self.ctx.instance(req.d_inst)
        pair = self.ctx.pair(p, d)
        req.transfer_start = self.env.now
        plan = self.plan(req, pair)
        req.transfer_bytes = plan.nbytes
        cap = pair.flow_cap(plan.senders)
        if d.state == "down":  # nobody to push to: the request is lost with D until detection
            p.release_prefill_kv(req)
            d.kv_arrived(req)
            return
        # P pushes into D's receive buffer: GPU buffer, else host pool, else it is lost
        req.buffer_where = d.buffer.reserve(plan.nbytes)
        p.send_started()
        self.send(req, p, d, plan.nbytes, plan.fixed_s, cap, lambda: self.pushed(req, p, d))

    def _release_peer(self, req, p, d, dead) -> None:
        if not self.push:
            return
        if req.buffer_where is not None:  # its reservation in D's receive buffer goes too
            d.buffer.cancel(req.transfer_bytes, req.buffer_where)
        req.buffer_where = None
        if p is not dead:
            p.send_finished()

    def pushed(self, req, p, d) -> None:
        req.transfer_end = self.env.now
        p.release_prefill_kv(req)
        p.send_finished()
        if req.buffer_where is None:
            d.recompute_lost(req)
            return
        d.kv_arrived(req)
