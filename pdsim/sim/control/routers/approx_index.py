"""An approximate prefix index: what a router believes each instance has cached, learned from
its own routing decisions (no cache events from the engines).

Routers that cannot query the engines' caches (SGLang router's approximate radix tree,
llm-d's approximate prefix-cache scorer, Dynamo's ``--no-kv-events`` mode) remember the
prompt blocks they sent to each worker. pdsim prompts carry prefix-chained block ids
(``hash_ids``: equal id k implies equal blocks before it), so one set of block ids per worker
is exactly a radix tree of the prompts sent there: the leading ids of a prompt found in the
set are the prompt's longest matched prefix.

Entries age out least-recently-used first once a worker holds more than ``capacity_blocks``
(SGLang router: ``max_tree_size``, evicted every ``eviction_interval``; llm-d:
``lruCapacityPerServer``). A prefix block is touched after the blocks it precedes, so
eviction takes a prompt's tail before its head, as a radix tree evicts leaves first.
"""
from __future__ import annotations

from collections import OrderedDict


class ApproxPrefixIndex:
    """Block ids routed to each worker (keyed by instance id), LRU-bounded per worker."""

    def __init__(self, capacity_blocks: int | None = None):
        self.capacity = capacity_blocks
        self._blocks: dict[int, OrderedDict] = {}

    def _of(self, wid: int) -> OrderedDict:
        d = self._blocks.get(wid)
        if d is None:
            d = self._blocks[wid] = OrderedDict()
        return d

    def match(self, wid: int, hash_ids) -> int:
        """Leading blocks of ``hash_ids`` this index believes ``wid`` holds."""
        d = self._blocks.get(wid)
        if not d or hash_ids is None:
            return 0
        n = 0
        for h in hash_ids:
            if h not in d:
                break
            n += 1
        return n

    def insert(self, wid: int, hash_ids, evict: bool = True) -> None:
        """Record that ``wid`` was sent a prompt with these blocks (most recent use now)."""
        if hash_ids is None or not len(hash_ids):
            return
        d = self._of(wid)
        # tail first, head last: the head ends up most recent, so LRU drops tails first
        for h in reversed(hash_ids.tolist() if hasattr(hash_ids, "tolist") else list(hash_ids)):
            if h in d:
                d.move_to_end(h)
            else:
                d[h] = None
        if evict:
            self.evict(wid)

    def evict(self, wid: int | None = None) -> None:
        """Drop least recently used blocks beyond the capacity (of ``wid``, or of every worker)."""
        if self.capacity is None:
            return
        for w in ([wid] if wid is not None else list(self._blocks)):
            d = self._blocks.get(w)
            while d is not None and len(d) > self.capacity:
                d.popitem(last=False)

    def size(self, wid: int) -> int:
        """Blocks held for ``wid``."""
        d = self._blocks.get(wid)
        return len(d) if d else 0

    def forget(self, wid: int) -> None:
        """A worker left: its entries go (SGLang router: ``remove_tenant``)."""
        self._blocks.pop(wid, None)
