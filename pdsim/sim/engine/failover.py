"""An instance's failure and restart (mixed into Instance, instance.py).

``fail()`` interrupts the engine process: the step in flight is lost, every request the instance
holds is released and handed back to the world (ports.evicted), and the instance is down until
``restart()``; a request held by a dead instance is parked until the failure is detected.
"""
from __future__ import annotations

from ..request import Request
from .lifecycle import DOWN, UP


class Failover:
    """Failure, restart and the release of everything an instance holds."""

    def fail(self) -> list[Request]:
        """Go down now: the step in flight is lost, every page is freed and the HBM prefix cache
        is gone. Returns the requests the instance held (now in ``limbo``, lost until the
        failure is detected)."""
        if self.state == DOWN:
            return []
        self.state = DOWN
        self.epoch += 1
        held = self._drain_all()
        self.limbo.extend(held)
        if self.proc.is_alive and self.env.active_process is not self.proc:
            self.proc.interrupt("failed")
        return held

    def _park(self, req: Request) -> None:
        """A request handed to this instance while it is down is lost with it; once the failure
        is known (detected), it goes straight back to the world."""
        if req.done:
            return
        if req.buffer_where is not None and self.buffer is not None:  # its KV reached a dead receiver
            self.buffer.cancel(req.transfer_bytes, req.buffer_where)
            req.buffer_where = None
        if self.detected:
            self.ports.evicted(req, self, f"{self.role}_unreachable")
        elif req not in self.limbo:
            self.limbo.append(req)

    def restart(self) -> None:
        """Serve again (the world calls it once the restart time has passed)."""
        if self.state != DOWN:
            return
        self.state = UP
        self.detected = False
        self.ratio = self.ratio_init
        up, self._up = self._up, self.env.event()
        up.succeed()

    def abandon(self, req: Request) -> None:
        """Forget ``req`` (it failed elsewhere and is retried or dropped): its queue places,
        pages, cached-block references and batch slot are given back."""
        self._take(req)
        self.wake()

    def _drain_all(self) -> list[Request]:
        """Every request held here, each taken out with its pages (a failure)."""
        reqs = {}
        for q in self.pq:
            for r in q:
                reqs[r.rid] = r
        for r in list(self.prealloc_q) + list(self.ready_q) + list(self.batch.running.values()) + \
                list(self.holding.values()):
            reqs[r.rid] = r
        for r in reqs.values():
            self._take(r)
        if self.cache is not None:
            self.cache.clear()  # HBM is gone with the process
        # what is left is the step in flight's growth pages: the pool starts empty on restart
        self.pool.reset()
        self.remote_loads = 0
        self._remote_start.clear()
        self._remote_reqs.clear()
        self.sending = 0
        self.load_until = 0.0
        b = self.batch
        b.running.clear()
        b.heap.clear()
        b.n = b.sum_ctx = b.rem_out = 0
        b.bucket = [0] * self.page
        return list(reqs.values())
