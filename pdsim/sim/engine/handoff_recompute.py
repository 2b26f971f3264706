"""A D that computes more of a handed-off prompt than one chunk (engine/admission.py calls these).

vLLM's shared-storage hand-off (``ExampleConnector``, transports/shared_storage.py) leaves D the
part of the prompt P's files do not hold: a short tail (2 to page + 1 tokens), or the whole prompt
when D's lookup misses (L - 1 a whole number of pages). ``get_num_new_matched_tokens`` answers
(loaded tokens, ``load_kv_async=False``), so vLLM v1's ``Scheduler.schedule`` takes the request
from its waiting queue with ``num_computed_tokens`` = the loaded tokens and schedules the rest as
an ordinary prefill: ``num_new_tokens = min(num_tokens - num_computed_tokens, token_budget)``,
the budget being ``max_num_batched_tokens`` less what the running requests (its decodes, one token
each) took first; the files are read in the first scheduled step (``start_load_kv``, only for
``scheduled_new_reqs``); the rest follows in chunks, one a step, beside the running decodes; the
step that computes the last chunk samples the first token, and the request decodes from the next
step on.

pdsim keeps a tail that fits in the step's prefill budget priced as before (the read and the tail
hold D's next step, admission.py ``_admit_ready``). A longer one is prefill work of D's own engine:
the request enters D's prefill queue with its loaded tokens counted as done and its pages already
allocated, and the engine loop (stepping.py) chunks it under the budget it gives every prefill,
mixed with D's decodes in the same step contract; the file read still holds the first step that
carries it, as before. Until the last chunk it counts against ``max_running_requests`` (it is in
vLLM's running list).
"""
from __future__ import annotations

import math

from ..request import Request


def prefill_room(inst) -> int:
    """Prefill tokens D's next step may carry: the budget its engine loop gives a prefill batch
    (stepping.py: the engine's per-rank chunk, less one token per running decode when prefill
    chunks ride in decode steps)."""
    if inst.dp != 1:
        return inst.rank_budget
    return max(0, inst.rank_budget - (inst.batch.n if inst.mixed else 0))


def start(inst, req: Request, own: int, read_s: float) -> None:
    """``req`` (its pages allocated, its files taken) computes its ``own`` last prompt tokens as
    chunked prefill on ``inst``; ``read_s`` (seconds) of file read hold the next step."""
    now = inst.env.now
    if read_s:
        req.d_load_s = read_s
        end = now + read_s
        if inst.host_core is not None:
            # the read is the worker's own CPU work (the step's forward reads the files), after any
            # tails admitted for the same step
            end = max(inst.load_until, now) + read_s
            inst.read_on_core = True
        if end > inst.load_until:
            inst.load_until = end
    req.decode_admit = now
    req.prefilled = req.input_len - own  # the loaded tokens: P's files
    req.pf_admitted = True  # its pages were allocated for the read
    inst.d_prefills.add(req.rid)
    # vLLM schedules its running requests (this one, once scheduled) before its waiting ones (those
    # retracted here, whose pages this one may be holding): first in line, behind prompts in progress
    inst.enqueue_prefill(req, front=True)


def complete(inst, req: Request, now: float) -> bool:
    """The step that computed ``req``'s last chunk is over: its first token leaves now and it
    joins the batch. False if ``req`` is not a hand-off being computed here."""
    if req.rid not in inst.d_prefills:
        return False
    inst.d_prefills.discard(req.rid)
    req.ctx0 = req.input_len
    if math.isnan(req.first_token):
        req.first_token = now
        inst.ports.first_token(req)
    inst._start_decoding(req, req.ctx0)
    return True
