"""Paged KV pool of one instance: capacity and use in pages of ``page_size`` tokens, and how
contiguous the pages of an allocation are.

Contiguity decides how many RDMA work requests a KV transfer posts (SGLang's Mooncake
connector merges runs of pages contiguous on both P and D into one transfer per layer:
costs/transfer.py ``kv_chunks``). The pool does not track page identities (callers allocate
and free counts); it keeps a fragmentation model of SGLang's paged allocator instead:

- the free list starts sorted and ``alloc`` takes pages from its head; freed pages wait in a
  release list and are merged back (sorted) only when the head runs out. So until a pool has
  handed out its capacity once, every allocation is one contiguous run from the never-used
  region (``fresh`` pages): an idle or young server sends each layer in one work request;
- after that (a churned pool) pages come from the holes between live allocations. Stated
  assumption (mean field): live runs and holes alternate in address order, so the mean hole is
  ``recycled free pages / live runs``, and an allocation of ``n`` recycled pages spans
  ``ceil(n / mean hole)`` runs. ``live_runs`` is kept exactly on allocation and drops in
  proportion to the pages released (a release frees the average run mix). Decode growth
  allocates one page at a time, interleaved across the batch, so a busy decode pool at
  page size 1 fragments into single pages, while page 64 keeps runs 64 tokens long;
- a pool with nothing in use is one hole again (the merge sorts it whole): fresh.
"""
from __future__ import annotations

import math


def pages_for(tokens: int, page_size: int) -> int:
    """Pages holding ``tokens`` tokens (the last one partly filled)."""
    return -(-tokens // page_size)


class KVPool:
    """Pages are allocated whole; ``capacity``, ``used`` and ``free`` are pages. Never
    over-allocates: ``alloc`` refuses (returns False) instead of exceeding capacity.
    ``free`` is kept as a field (read every step, changed far less often). ``last_runs``: the
    contiguous runs of the last successful allocation (module docstring)."""

    __slots__ = ("capacity", "used", "free", "page_size", "peak", "fresh", "live_runs", "last_runs")

    def __init__(self, capacity_tokens: int, page_size: int):
        self.page_size = page_size
        self.capacity = capacity_tokens // page_size
        self.used = 0
        self.free = self.capacity
        self.peak = 0
        self.fresh = self.capacity  # pages never handed out since the pool (re)started
        self.live_runs = 0.0  # contiguous runs among the pages in use (mean-field after churn)
        self.last_runs = 0

    def alloc(self, pages: int) -> bool:
        if pages > self.free:
            return False
        take = pages if pages <= self.fresh else self.fresh
        runs = 1 if take else 0
        rest = pages - take
        if rest:
            recycled = self.free - self.fresh  # free pages in holes between live runs
            hole = recycled / self.live_runs if self.live_runs >= 1.0 else float(recycled)
            runs += math.ceil(rest / hole) if hole > 1.0 else rest
        self.fresh -= take
        self.live_runs += runs
        self.last_runs = runs
        self.used += pages
        self.free -= pages
        if self.used > self.peak:
            self.peak = self.used
        return True

    def alloc_each(self, needs: list[int]) -> None:
        """``alloc`` of each count in ``needs`` in turn, every one known to fit (a run of decode
        steps, engine/stepping.py): the same arithmetic in the same order, bit for bit, on local
        counters written back once."""
        if not needs:
            return
        free, fresh, live, used = self.free, self.fresh, self.live_runs, self.used
        runs = 0
        for pages in needs:
            take = pages if pages <= fresh else fresh
            runs = 1 if take else 0
            rest = pages - take
            if rest:
                recycled = free - fresh
                hole = recycled / live if live >= 1.0 else float(recycled)
                runs += math.ceil(rest / hole) if hole > 1.0 else rest
            fresh -= take
            live += runs
            used += pages
            free -= pages
        if free < 0:
            raise RuntimeError(f"KV pool over-allocated by {-free} pages")
        self.free, self.fresh, self.live_runs, self.used, self.last_runs = free, fresh, live, used, runs
        if used > self.peak:
            self.peak = used

    def release(self, pages: int) -> None:
        if pages > self.used:
            raise RuntimeError(f"KV pool released {pages} pages but only {self.used} are in use")
        if pages:
            self.live_runs -= self.live_runs * pages / self.used
        self.used -= pages
        self.free += pages
        if self.used == 0:  # sorted whole at the next merge: as good as fresh
            self.live_runs = 0.0
            self.fresh = self.capacity

    def reset(self) -> None:
        """The instance restarted: an empty, fresh pool."""
        self.used, self.free, self.fresh = 0, self.capacity, self.capacity
        self.live_runs = 0.0
        self.last_runs = 0


def kv_runs(req) -> int | None:
    """Contiguous page runs of ``req``'s prompt KV moving P -> D: a run breaks where either
    end's pages break (SGLang groups indices contiguous on both sides), so breaks add:
    ``p_runs + d_runs - 1``. None when an end did not count them (a push transport, whose D
    side is a receive buffer written contiguously: P's runs alone)."""
    p = getattr(req, "p_runs", 0)
    d = getattr(req, "d_runs", 0)
    if p <= 0:
        return None
    return p + d - 1 if d > 0 else p
