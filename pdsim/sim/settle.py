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
