"""Guarantees that an engine's admitted work can always complete (engine/instance.py calls these).

- Full-context reserve while retracted requests wait. SGLang admits optimistically (its
  new-token-ratio reserve) and retracts the newest request when the pool runs out. Requests
  that each fit alone but not together would then be retracted and re-admitted for ever (the
  review's F1b livelock; bounded only by ``max_retractions_per_request``). While a retracted
  request waits to be recomputed, an instance admits a request only if the pages every request
  holding KV there still needs to finish fit too (``growth_pages`` + ``own_growth``): what runs
  can always finish and free its pages, and the retracted requests are served in turn. Ordinary
  runs never retract and are unchanged.
- P/D allocation-order deadlock. Decode allocates KV in arrival order; a prefill policy such as
  ``spf`` prefills out of it. A prefill pool full of prompts whose decode side has not allocated
  them, while prompts whose decode KV is allocated wait for its pages, waits for ever (SGLang
  cannot get there: its prefill server starts a prompt only once decode has allocated it).
  When nothing else in the world can happen (sim/settle.py), ``unblock_prefill`` gives the
  former's pages back (they are prefilled again later) and the instance admits only prompts
  with decode KV until none waits.

Pages: the instance's KV page size; a request's context grows by one token per decode step
(speculative decoding reserves whole contexts at admission, so it has no growth here).
"""
from __future__ import annotations

import math

from ..kv.pool import pages_for


def own_growth(inst, req, ctx: int) -> int:
    """Pages ``req`` adds to its ``ctx`` tokens of KV on ``inst`` until its last token."""
    if inst.q != 1.0:
        return 0
    rem = max(0, req.output_len - req.tokens_out())
    return pages_for(ctx + rem, inst.page) - pages_for(ctx, inst.page)


def growth_pages(inst) -> int:
    """Pages the requests holding KV on ``inst`` still need to finish: the running batch, and
    those admitted and waiting to join it."""
    if inst.q != 1.0:
        return 0
    page = inst.page
    b = inst.batch
    step = b.step
    total = 0
    for r in b.running.values():
        total += pages_for(r.ctx0 + r.remaining, page) - pages_for(r.ctx0 + step - r.admit_step, page)
    for r in inst.ready_q:
        if r.d_pages:
            total += own_growth(inst, r, r.ctx0)
    for q in inst.pq:
        for r in q:
            if r.pf_admitted:
                total += own_growth(inst, r, inst._prompt_len(r))
    return total


def full_context_reserve(inst, req, ctx: int, reserve: int) -> int:
    """The pages ``inst`` keeps free when admitting ``req`` with ``ctx`` tokens: ``reserve``
    (the engine's own), or the full-context reserve while retracted requests wait."""
    if not inst.recompute_ctx:
        return reserve
    return max(reserve, growth_pages(inst) + own_growth(inst, req, ctx))


def _decode_allocated(req) -> bool:
    return req.d_pages > 0


def unblock_prefill(inst) -> bool:
    """Prefill role, nothing in the world can progress: free prefilled prompts whose decode
    side has not allocated them (newest first; at least one per call, as the admission may keep
    a reserve beyond the first waiting prompt's pages) and enter the decode-allocated-first
    mode. Returns True if pages were freed."""
    waiting = [r for q in inst.pq for r in q if not r.pf_admitted and _decode_allocated(r)]
    if not waiting or inst.state != "up":
        return False
    need = pages_for(inst._prompt_len(waiting[0]), inst.page)
    # never a prompt whose transfer has started (P2P push modes send without decode allocation)
    victims = sorted((r for r in inst.holding.values() if not _decode_allocated(r) and math.isnan(r.transfer_start)),
                     key=lambda r: -r.rid)
    freed = False
    for v in victims:
        if freed and inst.pool.free >= need:
            break
        del inst.holding[v.rid]
        inst.pool.release(v.p_pages)
        v.p_pages = 0
        inst.kv.unref(v)
        v.prefill_ready = False  # its transfer waits for the new prefill (transports)
        v.pf_admitted = False
        v.prefilled = 0
        v.recomputes += 1
        v.recompute_tokens += v.input_len
        inst.enqueue_prefill(v)
        freed = True
    if freed:
        inst.decode_first = True
        inst.wake()
    return freed


def decode_first_done(inst) -> bool:
    """Leave the decode-allocated-first mode once no such prompt waits; True if the batch
    should be formed again."""
    if any(not r.pf_admitted and _decode_allocated(r) for q in inst.pq for r in q):
        return False
    inst.decode_first = False
    return True
