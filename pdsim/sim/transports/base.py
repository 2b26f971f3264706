"""The transport interface and what every transport shares.

A transport owns the P/D handoff of each request, from routing to D's admission:
- ``routed(req, p, d)``: the router picked ``p`` and ``d``; enqueue the request where its
  protocol starts (Mooncake/SGLang: D pre-allocates while P prefills; a push transport: P only);
- ``kv_allocated(req, d)``: D allocated pages for the prompt (pre-allocation protocols);
- ``prefill_done(req, p)``: P finished the prompt, its KV is ready to leave;
and moves the bytes with ``send``: a fixed overhead, then the sender's work requests, then a
flow on the fabric capped at the pair's rate; the returned ``Transfer`` can be cancelled (a peer
failed) at any point.

Work requests are a shared resource: each sending GPU's transfer engine posts them through its
own queue (Mooncake: one submission path per engine, slices spread over the GPU's preferred
NICs), so concurrent transfers from one P rank take turns. ``WorkRequestQueue`` is that server,
an exact FIFO kept as the time it next falls free: a transfer whose setup ends at ``t`` starts
posting at ``max(t, next_free)`` and holds it for its ``serial_s`` (chunks x per-chunk cost),
then its bytes join the fabric, which shares bandwidth among flows. Constant work per transfer:
one SimPy timeout, no event per chunk.

Build-time hooks ``setup_prefill``/``setup_decode`` attach what the protocol needs to the
instances (receive buffers, blocking sends). The per-request byte counts and overheads are
prices (costs/transfer.py); the pair constants they need are computed once at build
(build.py ``PairPlan``) and handed over as ``ctx.pair(p, d)``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ...plugins import Plugin, Registry
from ..clock import call_later


@dataclass
class TransportContext:
    """What a transport may use: the clock, the fabric, the pair plans, the world's ports."""

    env: Any
    fabric: Any
    pair: Callable[[Any, Any], Any]  # (p instance, d instance) -> build.PairPlan
    instance: Callable[[int], Any]  # instance id -> instance
    ports: Any
    overheads: Any = None  # specs.features.PDOverheadSpec, or None (no fixed costs)


class WorkRequestQueue:
    """Per-sender FIFO servers of RDMA work-request posting (see the module docstring).
    Keys are (P instance id, attention-DP rank); ``busy_s`` sums the posting time served and
    ``wait_s`` the time transfers queued behind others (seconds)."""

    __slots__ = ("next_free", "busy_s", "wait_s")

    def __init__(self):
        self.next_free: dict[tuple[int, int], float] = {}
        self.busy_s = 0.0
        self.wait_s = 0.0

    def reserve(self, key: tuple[int, int], ready: float, serial_s: float) -> float:
        """A transfer ready to post at ``ready`` (s) takes ``serial_s`` of the server ``key``;
        returns when its last work request is posted. FIFO in reservation order."""
        begin = self.next_free.get(key, 0.0)
        if begin < ready:
            begin = ready
        else:
            self.wait_s += begin - ready
        end = begin + serial_s
        self.next_free[key] = end
        self.busy_s += serial_s
        return end

    def clear(self, iid: int) -> None:
        """Instance ``iid`` restarted: its engines' queues are empty again."""
        for k in [k for k in self.next_free if k[0] == iid]:
            del self.next_free[k]


class Transfer:
    """One request's KV transfer in flight: the fixed overhead, then a fabric flow."""

    __slots__ = ("flow", "cancelled", "fabric", "req")

    def __init__(self, fabric):
        self.fabric = fabric
        self.flow = None
        self.cancelled = False

    def cancel(self) -> None:
        """Stop the transfer; its completion callback never runs."""
        self.cancelled = True
        if self.flow is not None:
            self.fabric.cancel(self.flow)


class Transport(Plugin):
    """Base class of KV transports (see the module docstring). ``spec``: the scenario's
    ``transfer`` block (specs.scenario.TransferSpec)."""

    # True when D hears of a request only from a proxy once P has answered (vLLM's disaggregation
    # proxy in front of a push connector): the way between is then a hop of its own on placed host
    # cores (world.handoff); False: the router sends to both at once (SGLang, Mooncake)
    proxied = False

    def __init__(self, params=None, spec=None):
        super().__init__(params)
        self.spec = spec

    def bind(self, ctx: TransportContext) -> None:
        self.ctx = ctx
        self.env = ctx.env
        self.fabric = ctx.fabric
        self.active: dict[int, tuple[Transfer, object, object]] = {}  # rid -> (transfer, p, d) in flight
        self.wr = WorkRequestQueue()
        self._ends: dict[tuple[int, int], tuple[str, str]] = {}  # (P iid, D iid) -> fabric endpoints

    # failures
    def instance_failed(self, inst) -> list:
        """``inst`` went down: cancel the transfers to or from it; returns their requests (lost
        with it). The surviving side gives back what it committed (``_release_peer``)."""
        lost = []
        self.wr.clear(inst.iid)  # its engines' queues die with it
        for rid, (t, p, d) in list(self.active.items()):
            if p is inst or d is inst:
                t.cancel()
                del self.active[rid]
                req = t.req
                self._release_peer(req, p, d, inst)
                lost.append(req)
        return lost

    def abandon(self, req) -> None:
        """``req`` is given up (failed elsewhere): stop its transfer, if any, and clear its handshake."""
        entry = self.active.pop(req.rid, None)
        if entry is not None:
            t, p, d = entry
            t.cancel()
            self._release_peer(req, p, d, None)
        req.prefill_ready = req.d_ready = False

    def _release_peer(self, req, p, d, dead) -> None:
        """What a cancelled transfer's live ends committed beyond their pages (push buffers)."""

    # build time
    def setup_prefill(self, inst) -> None:
        pass

    def setup_decode(self, inst, plan) -> None:
        pass

    def decode_kv_tokens(self, kv_tokens: int, plan) -> int:
        """Tokens left for D's KV pool once the transport took its share of HBM."""
        return kv_tokens

    def step_seq_us(self, role: str) -> float:
        """Host work (us) the connector adds to each step of a ``role`` instance per request in
        the step (its per-step bookkeeping in the engine): added to the group's
        ``efficiency.seq_overhead_us`` (sim/build.py). 0: none."""
        return 0.0

    # run time
    def routed(self, req, p, d) -> None:
        raise NotImplementedError

    def kv_allocated(self, req, d) -> None:
        pass

    def prefill_done(self, req, p) -> None:
        raise NotImplementedError

    def send(self, req, p, d, nbytes: float, fixed_s: float, cap: float, done: Callable[[], None],
             serial_s: float = 0.0) -> Transfer:
        """Move ``nbytes`` from ``p`` to ``d`` after ``fixed_s`` seconds of overhead, at most
        ``cap`` bytes/s; call ``done()`` when the last byte is there (unless cancelled).
        ``serial_s`` (part of ``fixed_s``): the work-request posting this transfer queues for on
        its sender's server (P instance, the request's DP rank); the rest of ``fixed_s`` (setup,
        handshake) runs in parallel with other transfers."""
        t = Transfer(self.fabric)
        t.req = req
        self.active[req.rid] = (t, p, d)

        def on_flow_end(_flow):
            # the flow is over (a cancel has nothing left to stop): dropping it breaks the
            # transfer -> flow -> this closure -> transfer cycle, so refcounting frees them
            t.flow = None
            if not t.cancelled:
                self.active.pop(req.rid, None)
                done()

        key = (p.iid, d.iid)
        ends = self._ends.get(key)
        if ends is None:  # the pair's endpoints in the fabric, fixed by its placement (as its PairPlan)
            link = self.ctx.pair(p, d).link
            ends = self._ends[key] = (p.nvl_node, d.nvl_node) if link == "nvlink" else (p.nic_node, d.nic_node)
        src, dst = ends

        def start(_ev=None):
            if not t.cancelled:
                t.flow = self.fabric.send(src, dst, nbytes, cap, on_flow_end)

        now = self.env.now
        if serial_s > 0:
            end = self.wr.reserve((p.iid, req.dp_rank), now + fixed_s - serial_s, serial_s)
            call_later(self.env, end - now, start)
        elif fixed_s > 0:
            call_later(self.env, fixed_s, start)
        else:
            start()
        return t


TRANSPORTS: Registry[Transport] = Registry("KV transport", Transport)
