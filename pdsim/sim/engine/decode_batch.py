"""The running decode batch of an instance, advanced in O(1) per step.

Requests in the batch are not touched step by step: each joins with its context length and the
step index at which its last token will be produced (a heap keyed by that step); the batch's
context sum, the tokens still owed (for SGLang's admission reserve) and the page growth are
updated arithmetically.

Page growth without visiting requests: a request whose context was ``c`` when it joined at
step ``s0`` needs a new page at step ``s`` exactly when ``(c + s - s0) % page == 0``, i.e. when
``(c - s0) % page == (-s) % page``. ``bucket[(c - s0) % page]`` counts the requests of each
class, so the pages a step needs are ``bucket[(-s) % page]``.
"""
from __future__ import annotations

import heapq
import math

from ..kv.pool import pages_for


class DecodeBatch:
    """``q``: tokens a sequence advances per step — 1, or under speculative decoding the
    expected accept length (a float): then every request's whole context is reserved when its
    KV is allocated (the instance does it), so the batch needs no per-step pages, a request
    finishes after ceil(remaining / q) steps, and the context sum grows by n q per step."""

    __slots__ = ("running", "heap", "n", "sum_ctx", "rem_out", "bucket", "step", "page", "q")

    def __init__(self, page_size: int, q: float = 1.0):
        self.page = page_size
        self.q = q
        self.running: dict[int, object] = {}  # rid -> request, in admission order (newest last)
        self.heap: list[tuple[int, int, object]] = []  # (finish step, rid, request)
        self.n = 0  # requests decoding
        self.sum_ctx: int | float = 0  # their context tokens (a float under speculative decoding)
        self.rem_out = 0  # decode steps still owed to them (admission reserve)
        self.bucket = [0] * page_size
        self.step = 0  # decode steps run so far

    def pages_needed(self) -> int:
        """New KV pages the next decode step needs (one per request crossing a page border)."""
        return self.bucket[(-self.step) % self.page]

    def join(self, req, ctx: int, remaining: int) -> None:
        """Add ``req`` with ``ctx`` tokens of KV; it still owes ``remaining`` >= 1 tokens."""
        s0 = self.step
        req.ctx0 = ctx
        req.admit_step = s0
        self.running[req.rid] = req
        self.n += 1
        self.sum_ctx += ctx
        if self.q == 1.0:
            req.finish_step = s0 + remaining - 1
            self.rem_out += remaining
            self.bucket[(ctx - s0) % self.page] += 1
        else:
            req.finish_step = s0 + math.ceil(remaining / self.q) - 1
        req.remaining = remaining
        heapq.heappush(self.heap, (req.finish_step, req.rid, req))

    def leave(self, req, last_step: int, shared_pages: int) -> int:
        """Remove ``req`` after step ``last_step``; records its stretch of steps on
        ``req.segments`` (with ``inst_id`` set by the caller) and returns its context length.
        ``req.d_pages`` becomes the pages its context occupies beyond ``shared_pages``."""
        del self.running[req.rid]
        steps = last_step - req.admit_step + 1
        self.n -= 1
        if self.q == 1.0:
            ctx = req.ctx0 + steps
            self.sum_ctx -= ctx
            self.rem_out -= req.finish_step - last_step
            self.bucket[(req.ctx0 - req.admit_step) % self.page] -= 1
            req.d_pages = pages_for(ctx, self.page) - shared_pages
            req.decoded += steps
            return ctx
        self.sum_ctx -= req.ctx0 + steps * self.q  # what the steps added to it
        if not self.n:
            self.sum_ctx = 0  # no float residue of the n q additions once the batch is empty
        # tokens out: all of them at its finish step, else the expected accept length so far
        made = req.remaining if last_step >= req.finish_step else min(req.remaining - 1, int(steps * self.q))
        req.decoded += made
        return req.ctx0 + made  # its pages stay reserved for the whole context (see the class doc)

    def extend_pairs(self) -> float:
        """Attention pairs of the batch's next step were each sequence a one-token extend whose
        query spans its whole context (SGLang's mixed chunk under torch_native attention): the sum
        of (context + 1)^2 / 2. O(n): only such steps ask (q == 1 there: no speculative decoding)."""
        s = self.step
        return sum((r.ctx0 + s - r.admit_step + 1) ** 2 for r in self.running.values()) / 2.0

    def newest(self):
        """The most recently admitted request (SGLang retracts from the back of the batch)."""
        return self.running[next(reversed(self.running))]

    def advance(self, n: int, now: float, on_finish) -> None:
        """Account one decode step of ``n`` requests ending at ``now``; call
        ``on_finish(req, step)`` for each request whose last token came out in it, one at a
        time, in heap order (each is finished before the next is looked at)."""
        step = self.step
        self.step = step + 1
        if self.q == 1.0:
            self.sum_ctx += n
            self.rem_out -= n
        else:
            self.sum_ctx += n * self.q
        heap = self.heap
        running = self.running
        while heap and heap[0][0] <= step:
            fstep, _rid, req = heapq.heappop(heap)
            if req.finish_step != fstep or req.rid not in running:
                continue  # stale entry of a retracted request
            on_finish(req, step)
