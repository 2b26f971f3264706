"""vLLM's shared-storage KV handoff (``ExampleConnector``), as a transport.

P, after prefilling a request, saves the KV of the prompt's whole pages (of its first L - 1
tokens) as one file per layer under a folder both engines see, on its engine thread (P's loop
waits for the writes, like P2P NCCL PUT); D, when it schedules the request, loads every layer's
file into its paged KV (synchronously: the load holds D's step) and computes the prompt's tail
past the loaded pages in the same step, which samples the first token the client sees (the
proxy drops P's token): the request's first token comes after D's load and that tail compute
(``d_tail_s``, priced with D's own step model as a prefill chunk over the loaded context). When
D's lookup misses P's folder (L - 1 a whole number of pages) it computes the whole prompt. What D
computes past its step's prefill budget (a whole-prompt miss longer than D's chunk) is not one step:
vLLM's scheduler runs it as chunked prefill under ``max_num_batched_tokens``, beside D's decodes,
first token at the last chunk (engine/handoff_recompute.py). No bytes cross the fabric between P
and D: the file system carries them. Prices and which tokens: costs/shared_storage.py.

On placed host cores (``host.placement``, a CPU host; issue 24 item 5): D hears of the request only
when the proxy, having P's answer, sends it the request; that way (P's answer out, the proxy, D's
way in: ``router_ms`` of idle work, the half of the path each way that lies between P and D) is a
hop on the cores after the files are written (world.py ``handoff``), and D's file read and tail
forward are its worker's own CPU work in the step that samples the first token (engine/admission.py).
In the real engine both file operations run inside the workers' forwards (``save_kv_layer`` in P's,
``start_load_kv`` in D's), so P's write is priced here after its step, at page-cache speed.

Parameters (``transfer: {backend: shared_storage, params: {...}}``): the file system's write and
read bandwidth (GB/s) and per-file overhead (us). Defaults: measured on this project's machines
by calibration/microbench/shared_storage.py (calibration/data/shared_storage.csv: local disk
through the page cache, Python file I/O as safetensors does; 2026-11-23). ``step_seq_us``: the
connector's own work in every step of P and D, per request in the step (us; its per-step
bookkeeping and per-layer hooks), priced as extra ``seq_overhead_us`` of both groups; measured
by timing decode steps on servers with and without it (Params).
"""
from __future__ import annotations

from dataclasses import dataclass

from ...costs.shared_storage import loaded_tokens, read_s, saved_tokens, write_s
from ...specs._convert import check
from .base import TRANSPORTS, Transport


class FileStore:
    """D's side of the handoff: KV written by P waits in files; ``take`` prices the load."""

    def __init__(self, read_bps: float, overhead_s: float, layers: int, kv_bytes_per_token: float,
                 page: int = 1, cost=None):
        self.read_bps, self.overhead_s, self.layers = read_bps, overhead_s, layers
        self.kvb = kv_bytes_per_token
        self.page, self.cost = page, cost
        self.used = {"file": 0.0}
        self.read_bytes = 0.0
        self.cancelled = 0.0

    def take(self, nbytes: float, where: str) -> float:
        self.used[where] -= nbytes
        self.read_bytes += nbytes
        if nbytes <= 0:
            return 0.0  # D's lookup found no folder: nothing to read
        return read_s(nbytes / self.kvb, self.kvb, self.layers, self.read_bps, self.overhead_s)

    def d_tail_tokens(self, req) -> int:
        """Prompt tokens D computes itself before the first token (the tail, or the whole prompt
        on a lookup miss); 0 without a step model, as ``d_tail_s``."""
        if self.cost is None:
            return 0
        return req.input_len - loaded_tokens(req.input_len, self.page)

    def d_tail_s(self, req) -> float:
        """D's own compute of the prompt's tail before its first token: one prefill chunk of
        ``tail_tokens`` over the loaded context, priced with D's step model (seconds; 0 without one)."""
        if self.cost is None:
            return 0.0
        h = loaded_tokens(req.input_len, self.page)
        t = req.input_len - h
        return self.cost.step_time(t, t * (h + t / 2.0), 1, 0, 0.0)

    def cancel(self, nbytes: float, where: str) -> None:
        self.used[where] -= nbytes
        self.cancelled += nbytes

    def stats(self) -> dict:
        return {"read_bytes": self.read_bytes, "resident_bytes": self.used["file"], "cancelled_bytes": self.cancelled}


@TRANSPORTS.register("shared_storage")
class SharedStorage(Transport):
    # vLLM's proxy (pdsim.replay.pd_proxy, the disaggregation examples) sends the request to P with
    # max_tokens 1 and, once P has answered, to D: on placed host cores that way is a hop of its own
    # (P's answer out, the proxy, D's way in), after P's files are written (world.handoff)
    proxied = True

    @dataclass(frozen=True)
    class Params:
        write_gbps: float = 5.86  # measured (calibration/data/shared_storage.csv)
        read_gbps: float = 38.7  # measured: page-cache reads
        file_overhead_us: float = 12.0  # measured: open + write + close of one file
        # ExampleConnector's per-step work in each engine (kv_both: P and D), per request in the
        # step: decode steps at batch 1 and 4 on servers with and without it, interleaved twice
        # (validation/cpu-vllm-calibration/zen1/host-contention/connector_overhead.json, 2026-11-27,
        # Zen 1 host): +0.36 / +0.39 ms at batch 1, +1.44 / +1.15 ms at batch 4, i.e. 0.29-0.39 ms a
        # request; the median of the four, 0.36 ms
        step_seq_us: float = 360.0

        def __post_init__(self) -> None:
            for name in ("write_gbps", "read_gbps"):
                check(getattr(self, name) > 0, f"must be > 0 GB/s, got {getattr(self, name)}", name)
            for name in ("file_overhead_us", "step_seq_us"):
                check(getattr(self, name) >= 0, f"must be >= 0 us, got {getattr(self, name)}", name)

    def step_seq_us(self, role: str) -> float:
        return self.params.step_seq_us if role in ("prefill", "decode") else 0.0

    def bind(self, ctx) -> None:
        super().bind(ctx)
        # rid -> (D, attempt, bytes) of the files whose proxy hop to D is still running (world.handoff)
        self.handing: dict[int, tuple] = {}

    def setup_prefill(self, inst) -> None:
        inst.block_on_send = True  # saves run on P's engine thread

    def setup_decode(self, inst, plan) -> None:
        p = self.params
        inst.buffer = FileStore(p.read_gbps * 1e9, p.file_overhead_us * 1e-6, plan.model.num_layers,
                                plan.kv_bytes_per_token, plan.group.engine.page_size, plan.cost)

    def routed(self, req, p, d) -> None:
        p.enqueue_prefill(req)

    def prefill_done(self, req, p) -> None:
        d = self.ctx.instance(req.d_inst)
        plan = p.plan
        req.transfer_start = self.env.now
        page = p.plan.group.engine.page_size
        saved = saved_tokens(req.input_len, page)
        # D reads what its lookup finds (P's files, or nothing when the keys differ); the rest is its tail
        req.transfer_bytes = loaded_tokens(req.input_len, page) * plan.kv_bytes_per_token
        dur = write_s(saved, plan.kv_bytes_per_token, plan.model.num_layers, self.params.write_gbps * 1e9,
                      self.params.file_overhead_us * 1e-6)
        p.send_started()
        attempt, epoch = req.retries, p.epoch
        self.env.timeout(dur).callbacks.append(lambda _e: self._written(req, p, d, attempt, epoch))

    def _written(self, req, p, d, attempt: int, epoch: int) -> None:
        if p.epoch != epoch:
            return  # P failed while writing: its engine (and the write) are gone
        if req.retries != attempt or req.done:
            p.send_finished()
            return
        req.transfer_end = self.env.now
        p.release_prefill_kv(req)
        p.send_finished()
        req.buffer_where = "file"
        if d.buffer is not None:
            d.buffer.used["file"] += req.transfer_bytes
        nbytes = req.transfer_bytes
        self.handing[req.rid] = (d, attempt, nbytes)
        self.ctx.ports.handoff(req, lambda: self._to_d(req, d, attempt, nbytes))

    def abandon(self, req) -> None:
        """Given up (a timeout, a retry): files whose proxy hop is still running are nobody's now;
        D gives them back at once, not when the hop ends (the run may end first: its last request
        given up mid-hop left them counted in D's store)."""
        super().abandon(req)
        entry = self.handing.pop(req.rid, None)
        if entry is not None:
            d, _attempt, nbytes = entry
            if d.buffer is not None:
                d.buffer.cancel(nbytes, "file")
            req.buffer_where = None

    def _to_d(self, req, d, attempt: int, nbytes: float) -> None:
        """The proxy's request has reached D: D looks the prompt up and loads P's files."""
        entry = self.handing.get(req.rid)
        if entry is None or entry[1] != attempt:
            return  # given up during the hop: abandon() gave the files back
        del self.handing[req.rid]
        if req.retries != attempt or req.done:
            # given up or retried while the proxy's hop ran: nobody will read these files
            if d.buffer is not None:
                d.buffer.cancel(nbytes, "file")
            if req.retries == attempt:
                req.buffer_where = None
            return
        d.kv_arrived(req)

    def _release_peer(self, req, p, d, dead) -> None:
        if req.buffer_where == "file" and d.buffer is not None:
            d.buffer.cancel(req.transfer_bytes, "file")
        req.buffer_where = None
