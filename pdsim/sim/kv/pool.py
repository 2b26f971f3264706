"""Paged KV pool of one instance: capacity and use in pages of ``page_size`` tokens."""
from __future__ import annotations


def pages_for(tokens: int, page_size: int) -> int:
    """Pages holding ``tokens`` tokens (the last one partly filled)."""
    return -(-tokens // page_size)


class KVPool:
    """Pages are allocated whole; ``capacity``, ``used`` and ``free`` are pages. Never
    over-allocates: ``alloc`` refuses (returns False) instead of exceeding capacity.
    ``free`` is kept as a field (read every step, changed far less often)."""

    __slots__ = ("capacity", "used", "free", "page_size", "peak")

    def __init__(self, capacity_tokens: int, page_size: int):
        self.page_size = page_size
        self.capacity = capacity_tokens // page_size
        self.used = 0
        self.free = self.capacity
        self.peak = 0

    def alloc(self, pages: int) -> bool:
        if pages > self.free:
            return False
        self.used += pages
        self.free -= pages
        if self.used > self.peak:
            self.peak = self.used
        return True

    def release(self, pages: int) -> None:
        if pages > self.used:
            raise RuntimeError(f"KV pool released {pages} pages but only {self.used} are in use")
        self.used -= pages
        self.free += pages
