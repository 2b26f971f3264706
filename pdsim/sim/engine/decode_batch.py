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

from ..kv.pool import pages_for


class DecodeBatch:
    __slots__ = ("running", "heap", "n", "sum_ctx", "rem_out", "bucket", "step", "step_end", "page")

    def __init__(self, page_size: int):
        self.page = page_size
        self.running: dict[int, object] = {}  # rid -> request, in admission order (newest last)
        self.heap: list[tuple[int, int, object]] = []  # (finish step, rid, request)
        self.n = 0  # requests decoding
        self.sum_ctx = 0  # their context tokens
        self.rem_out = 0  # decode steps still owed to them (admission reserve)
        self.bucket = [0] * page_size
        self.step = 0  # decode steps run so far
        self.step_end: list[float] = []  # end time of every decode step (token times)

    def pages_needed(self) -> int:
        """New KV pages the next decode step needs (one per request crossing a page border)."""
        return self.bucket[(-self.step) % self.page]

    def join(self, req, ctx: int, remaining: int) -> None:
        """Add ``req`` with ``ctx`` tokens of KV; it still owes ``remaining`` >= 1 tokens."""
        s0 = self.step
        req.ctx0 = ctx
        req.admit_step = s0
        req.finish_step = s0 + remaining - 1
        self.running[req.rid] = req
        heapq.heappush(self.heap, (req.finish_step, req.rid, req))
        self.n += 1
        self.sum_ctx += ctx
        self.rem_out += remaining
        self.bucket[(ctx - s0) % self.page] += 1

    def leave(self, req, last_step: int, shared_pages: int) -> int:
        """Remove ``req`` after step ``last_step``; records its stretch of steps on
        ``req.segments`` (with ``inst_id`` set by the caller) and returns its context length.
        ``req.d_pages`` becomes the pages its context occupies beyond ``shared_pages``."""
        del self.running[req.rid]
        steps = last_step - req.admit_step + 1
        ctx = req.ctx0 + steps
        self.n -= 1
        self.sum_ctx -= ctx
        self.rem_out -= req.finish_step - last_step
        self.bucket[(req.ctx0 - req.admit_step) % self.page] -= 1
        req.d_pages = pages_for(ctx, self.page) - shared_pages
        return ctx

    def newest(self):
        """The most recently admitted request (SGLang retracts from the back of the batch)."""
        return self.running[next(reversed(self.running))]

    def advance(self, n: int, now: float, on_finish) -> None:
        """Account one decode step of ``n`` requests ending at ``now``; call
        ``on_finish(req, step)`` for each request whose last token came out in it, one at a
        time, in heap order (each is finished before the next is looked at)."""
        step = self.step
        self.step = step + 1
        self.step_end.append(now)
        self.sum_ctx += n
        self.rem_out -= n
        heap = self.heap
        running = self.running
        while heap and heap[0][0] <= step:
            fstep, _rid, req = heapq.heappop(heap)
            if req.finish_step != fstep or req.rid not in running:
                continue  # stale entry of a retracted request
            on_finish(req, step)
