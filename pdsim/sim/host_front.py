"""The request path's front process: one thread that serves its hops one after another (issue 24
item 5), each hop, once served, a job on the shared host cores (host_cores.py ``HostCores.hop``)."""
from __future__ import annotations

from collections import deque

from .host_cores import HostCores, _Job


class FrontHop:
    """One hop queued at or served by a ``SerialFront``: ``done`` fires when its work is done."""

    __slots__ = ("done", "job", "work")

    def __init__(self, work: float, done):
        self.work = work  # seconds of CPU at full speed
        self.done = done
        self.job: _Job | None = None  # its job on the cores once it is served


class SerialFront:
    """The request path's front process (issue 24 item 5): the proxy's or API server's one event
    loop and an engine core's one thread serve the request path's hops (the way in, the P -> D
    hand-off, the first token's way out) one after another, FIFO; each hop, once served, is a job
    on the host cores (``HostCores.hop``: the least loaded core, processor sharing there). Exact
    for the recorded CPU deployments, where every hop passes one process: the 1P1D proxy (vLLM's
    disaggregation example, ``pdsim.replay.pd_proxy``: one aiohttp loop) or a single server's API
    server; with several API servers and no proxy in front it serialises hops that would overlap."""

    def __init__(self, host: HostCores):
        self.host = host
        self.queue: deque[FrontHop] = deque()  # submitted, not yet served
        self.current: FrontHop | None = None  # being served

    def hop(self, work: float) -> FrontHop:
        """Submit a hop of ``work`` seconds of CPU (at full speed); it starts when the hops ahead of
        it are done. Returns it (``.done``: the SimPy event that fires when its work is done)."""
        if not (work >= 0.0 and work < float("inf")):
            raise ValueError(f"a hop's work must be >= 0 s and finite, got {work}")
        h = FrontHop(float(work), self.host.env.event())
        if self.current is None:
            self._serve(h)
        else:
            self.queue.append(h)
        return h

    def _serve(self, h: FrontHop) -> None:
        self.current = h
        h.job = self.host.hop(h.work)
        h.job.done.callbacks.append(lambda _e, h=h: self._served(h))

    def _served(self, h: FrontHop) -> None:
        # the next hop takes the process before anything ``h`` sets off can queue behind it
        self.current = None
        if self.queue:
            self._serve(self.queue.popleft())
        h.done.succeed()

    def finish_time(self, h: FrontHop) -> float:
        """When ``h`` would be done if who runs where stayed as it is now (the world stops with hops
        left): the hop in service at the rates of this moment, the queued ones after it in turn,
        each stretched as the one in service is."""
        if h.done.triggered:  # done this instant; the world stopped before its callbacks ran
            return self.host.env.now
        cur = self.current
        if cur is None:
            raise ValueError("the hop is not at this front")
        now = self.host.env.now
        if cur.job.done.triggered:
            # its work ended this instant and the world stopped before the front moved on (the last
            # request done at the same time): it ends now, the queued ones after it at full speed
            end, stretch = now, 1.0
        else:
            end = self.host.finish_time(cur.job)
            stretch = (end - now) / cur.job.left if cur.job.left > 0 else 1.0
        if h is cur:
            return end
        for q in self.queue:
            end += q.work * stretch
            if q is h:
                return end
        raise ValueError("the hop is not at this front")
