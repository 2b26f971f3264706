"""Paged KV pool of one instance: capacity and use in pages of ``page_size`` tokens."""
from __future__ import annotations


def pages_for(tokens: int, page_size: int) -> int:
    return -(-tokens // page_size)


class KVPool:
    """Pages are allocated whole; ``capacity`` and counts are pages. Never over-allocates:
    ``alloc`` refuses (returns False) instead of exceeding capacity."""

    __slots__ = ("capacity", "used", "page_size", "peak", "bytes_per_page")

    def __init__(self, capacity_tokens: int, page_size: int, bytes_per_token: float = 0.0):
        self.page_size = page_size
        self.capacity = capacity_tokens // page_size
        self.used = 0
        self.peak = 0
        self.bytes_per_page = bytes_per_token * page_size

    @property
    def free(self) -> int:
        return self.capacity - self.used

    def can_alloc(self, pages: int) -> bool:
        return pages <= self.capacity - self.used

    def alloc(self, pages: int) -> bool:
        if pages > self.capacity - self.used:
            return False
        self.used += pages
        if self.used > self.peak:
            self.peak = self.used
        return True

    def release(self, pages: int) -> None:
        if pages > self.used:
            raise RuntimeError(f"KV pool released {pages} pages but only {self.used} are in use")
        self.used -= pages
