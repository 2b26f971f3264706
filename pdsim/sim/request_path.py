"""The request path's hops on placed host cores (issue 24 items 3 and 5), a mixin of the world.

Without a placement a request's way in (``ingress_s``: HTTP, proxy, tokeniser) and its tokens' way
out (``egress_s``) are fixed delays, their idle-host time. With placed host cores
(``host.placement``) they are CPU work of the unpinned processes: hops that queue at the request
path's one front process (host_cores.py ``SerialFront``) and share the cores with the workers. A
proxied P/D transport (the proxy asks D only once P has answered) moves the halves of the path that
lie between P and D into a hand-off hop of its own. Seconds throughout.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from .host_front import SerialFront
from .request import Request


class RequestPath:
    """World mixin: ``front``, ``handoff_s``, the first token's way out and the P -> D hand-off."""

    def _setup_request_path(self, host_cores, disaggregated: bool) -> None:
        """After ``ingress_s`` / ``egress_s`` and the transport are set: the front process on placed
        host cores, and the hand-off's share of the path for a proxied transport."""
        self.front = SerialFront(host_cores) if host_cores is not None else None
        self.handoff_s = 0.0  # P's answer -> the proxy -> D has the request (placed, proxied transport)
        if self.front is not None and disaggregated and getattr(self.transport, "proxied", False):
            # ``router_ms`` of a proxied P/D run is the request path of both servers each way (in: to P
            # and to D; out: P's answer and D's stream): P's way out and D's way in are the hand-off
            self.handoff_s = self.ingress_s / 2 + self.egress_s / 2
            self.ingress_s /= 2
            self.egress_s /= 2

    def first_token(self, req: Request) -> None:
        """An engine has set ``req.first_token`` (now or, for a D that first loads and computes the
        tail, a moment ahead). With placed host cores the token's way out (``egress_s``, the same
        idle-host time every token gets) is a hop sharing them from then; its time beyond
        ``egress_s`` is kept per request and moves the request's whole stream (accounting.py)."""
        front = self.front
        if front is None or not self.egress_s:
            return
        def out(_e=None, r=req, t0=req.first_token):
            if r.first_token != t0:
                return  # evicted and retried before its token left: the retry's token counts
            job = front.hop(self.egress_s)
            self._hops_out[r.rid] = (job, t0)
            job.done.callbacks.append(lambda _e, r=r, t0=t0: self._out_done(r.rid, t0, self.env.now))
        # from the token's time, once the engine has done what it does at that moment: its worker
        # goes on with its next step at once (it polls, holding its core), so a hop that starts
        # between two steps must not take that core as if it were free
        self.env.timeout(max(req.first_token - self.env.now, 0.0)).callbacks.append(out)

    def handoff(self, req: Request, then: Callable[[], None]) -> None:
        """P has answered the proxy for ``req`` (a proxied transport: D hears of the request only
        from the proxy's second request); ``then()`` once D's engine has it. With placed host cores
        the way between (P's answer out, the proxy, D's way in: ``handoff_s`` of idle-host work) is
        a hop at the front (host_cores.py SerialFront); without, it is inside ``router_ms`` in and
        out, as before, and ``then()`` runs now."""
        if self.front is None or not self.handoff_s:
            then()
            return
        self.front.hop(self.handoff_s).done.callbacks.append(lambda _e: then())

    def _out_done(self, rid: int, t0: float, end: float) -> None:
        """Request ``rid``'s first token (left its engine at ``t0``) reached the client at ``end``."""
        self._hops_out.pop(rid, None)
        self.egress_extra[rid] = max(0.0, end - t0 - self.egress_s)  # >= 0 but for float residue

    def egress_extras(self) -> np.ndarray:
        """Per request, its first token's way out beyond ``egress_s`` (s; 0 without placed cores).
        A hop still running when the world stops ends at the rates of that moment."""
        for rid, (job, t0) in list(self._hops_out.items()):
            self._out_done(rid, t0, self.front.finish_time(job))
        extra = np.zeros(len(self.table))
        if self.egress_extra:
            ids = np.fromiter(self.egress_extra, dtype=np.int64, count=len(self.egress_extra))
            extra[ids] = np.fromiter(self.egress_extra.values(), dtype=np.float64, count=len(ids))
        return extra
