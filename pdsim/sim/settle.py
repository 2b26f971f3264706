"""How a run ends when nothing can progress any more.

A world runs until every request is finished or dropped. Periodic processes (autoscaler ticks,
random failures, fault plug-ins: ``World.daemon``) always have their next event queued, so an
empty event queue cannot be the test: the world has settled when the queue holds nothing but
their events (and no autoscaler has a planned action ahead, ``Autoscaler.pending``). Then no
request can move: what is still live is given up with a reason a user can act on, and the
run ends (or goes on, if that freed a closed-loop slot whose next request can be served):

- requests the router holds for want of an instance of a role: ``no_instance_available``
  (the instances they need are dead for good);
- requests on expert-service clients while some expert has no live replica and none is coming
  back: the clients cannot step again; they fail (``expert_unavailable``) and release their KV.

Periodic processes can also keep events coming while nothing progresses for good: random
failures so frequent that a service is down more than it is up (an expert without a live
replica almost all the time). ``watch`` (a periodic process itself, started when the world has
others) drops the live requests ``stalled`` when no engine step completed and no request ended
for ``stall_limit_s``: max(1 h, 10 x the longest repair of the random faults) of simulated time.
A request that waits that long is lost to its client in any real deployment.

Before giving anything up, a prefill instance whose pool is full of prompts waiting for their
decode side, while prompts whose decode KV is allocated wait for its pages, frees the former
(engine/progress.py): the run goes on. Only a world where nothing else can happen gets
there, so ordinary runs are unchanged.
"""
from __future__ import annotations

from .engine.progress import unblock_prefill


def only_daemons(world) -> bool:
    """Whether every queued event belongs to a periodic process (see the module docstring)."""
    if len(world.env._queue) > world.daemons:
        return False
    a = world.autoscaler
    return a is None or not a.policy.pending(world.env.now)


def give_up(world) -> bool:
    """Unblock what can be, else give up the requests that can never be served; True if
    either happened."""
    if any(inst.role == "prefill" and unblock_prefill(inst) for inst in world.instances):
        return True  # a P/D allocation-order deadlock broken: requests can progress again
    changed = False
    svc = world.experts
    if svc is not None and svc.gate is not None:
        for inst in world.instances:
            if inst.state != "down" and inst.group.expert_service:
                changed = True
                world.fail_instance(inst, "expert_unavailable")
                world.detected(inst, "expert_unavailable", final=True)
    while world._held:  # dropping one frees a closed-loop slot, whose request may be held too
        held, world._held = world._held, []
        for req in held:
            changed = True
            world.dropped(req, "no_instance_available")
    return changed


STALL_MIN_S = 3600.0  # simulated seconds without progress before live requests are dropped ``stalled``
STALL_CHECK_S = 60.0


def stall_limit_s(spec) -> float:
    """The no-progress limit of a world with fault spec ``spec`` (None: no faults)."""
    longest = max((rf.mttr_s for rf in spec.random), default=0.0) if spec is not None else 0.0
    return max(STALL_MIN_S, 10.0 * longest)


def _progress(world) -> int:
    return world.n_finished + world.n_dropped + sum(len(i.steps) - len(i.cut_steps) for i in world.instances)


def watch(world):
    """Periodic process: drop the live requests ``stalled`` after ``stall_limit_s`` without
    progress (see the module docstring)."""
    env = world.env
    limit = stall_limit_s(world.faults.spec if world.faults is not None else None)
    seen, since = _progress(world), env.now
    while True:
        yield env.timeout(STALL_CHECK_S)
        now_p = _progress(world)
        if now_p != seen or not world.live:
            seen, since = now_p, env.now
            continue
        if env.now - since < limit:
            continue
        world.log_event("stalled", "cluster", f"no progress for {env.now - since:.0f} s: "
                        f"{len(world.live)} requests dropped")
        svc = world.experts
        if svc is not None and svc.gate is not None:
            for inst in world.instances:
                if inst.state != "down" and inst.group.expert_service:
                    world.fail_instance(inst, "expert_unavailable")
                    world.detected(inst, "expert_unavailable", final=True)
        # a closed loop sends its next request as each slot frees: drop those too, they would
        # wait on the same stalled cluster
        while True:
            live = [r for r in world.live.values() if not r.done and r.rid not in world._cc_waiting]
            if not live:
                break
            for req in live:
                world._evict(req, "stalled", final=True)
        seen, since = _progress(world), env.now
