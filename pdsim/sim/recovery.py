"""What a world does when an instance fails (mixed into World, world.py): control/faults.py
drives these. A failed instance's requests wait until the failure is detected, then are
evicted and retried (or dropped with a reason); a restarted instance rejoins the membership.
"""
from __future__ import annotations

from .engine.instance import Instance
from .request import Request


class Recovery:
    """Failure, detection, eviction and an instance coming back."""

    def log_event(self, kind: str, what: str, detail: str) -> None:
        self.events.append((self.env.now, kind, what, detail))

    def _capacity(self, delta: int) -> None:
        self.gpus_up += delta
        self.capacity_log.append((self.env.now, self.gpus_up))

    def fail_instance(self, inst: Instance, reason: str) -> None:
        """``inst`` goes down now: what it held, and the transfers to or from it, are lost with it
        until the failure is detected."""
        inst.fail()
        for req in self.transport.instance_failed(inst):
            if req not in inst.limbo:
                inst.limbo.append(req)
        self._capacity(-inst.gpus)
        self.log_event("failed", inst.name, reason)

    def detected(self, inst: Instance, cause: str, final: bool = False) -> None:
        """The monitor declares ``inst`` dead: the router stops using it; its requests are retried
        or dropped by the retry policy (``final``: dropped, nothing can serve them again)."""
        self.members.deregister(inst)
        inst.detected = True
        lost, inst.limbo = inst.limbo, []
        # requests elsewhere whose other half was on it (P prefilling for a dead D, ...)
        seen = {r.rid for r in lost}
        lost += [r for r in self.live.values() if not r.done and r.rid not in seen and inst.iid in (r.p_inst, r.d_inst)]
        self.log_event("detected", inst.name, f"{len(lost)} requests lost")
        for req in lost:
            self._evict(req, cause if final else f"{inst.role}_{cause}", final)

    def instance_up(self, inst: Instance, new: bool = False) -> None:
        """``inst`` serves again (restarted, or newly added): it joins the router's view."""
        inst.restart()
        self._ever_up.add(inst.iid)
        self.members.register(inst)
        self._capacity(inst.gpus)
        self.log_event("up", inst.name, "added" if new else "restarted")
        held, self._held = self._held, []
        for req in held:
            self._route(req)

    def _evict(self, req: Request, reason: str, final: bool = False) -> None:
        """Give ``req`` up where it is (both of its instances and its transfer), then retry it or
        drop it by the retry policy (``final``: drop it)."""
        if req.done:
            return
        if req in self._held:
            self._held.remove(req)
        for iid in {req.p_inst, req.d_inst}:
            if iid >= 0:
                inst = self.instances[iid]
                if inst._take(req) and inst.state == "up":
                    inst.wake()
        self.transport.abandon(req)
        retry = self.faults.spec.retry if self.faults is not None else None
        if not final and retry is not None and retry.policy == "restart" and req.retries < retry.max_retries:
            self.retry_causes[reason] = self.retry_causes.get(reason, 0) + 1
            req.reset_for_retry()
            delay = retry.backoff_s + self.ingress_s
            if delay > 0:
                self.env.timeout(delay).callbacks.append(lambda _e, r=req: self._routed(r))
            else:
                self._routed(req)
        else:
            self.dropped(req, reason if final or retry is None or retry.policy == "drop" else f"{reason}_after_retries")

    def _release_slot(self) -> None:
        self.in_flight -= 1
        if self._cc_waiting:
            req = self.live[self._cc_waiting.popleft()]
            # a closed-loop client sends when a slot frees; latencies count from the send,
            # as bench_serving measures them under --max-concurrency
            req.arrival = self.env.now
            self._start(req)
