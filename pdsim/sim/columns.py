"""Columnar logs: rows appended to plain Python lists (the cheapest append there is) and moved
into typed numpy chunks every ``CHUNK`` rows, so a long run keeps each value as 4 or 8 bytes
instead of a boxed Python number (~32 bytes) in a list. Used for the engine's step log, the
decode-step end times and the fabric's link-usage log.

The staging lists are cleared in place, so a hot loop may bind them once; it calls ``flush``
when ``len(lists[0]) >= CHUNK`` *before* appending, so the newest row always sits in the lists
(the engine may still correct the duration of the step in flight after a failure).
"""
from __future__ import annotations

import numpy as np

#: rows staged in lists before they move into a numpy chunk
CHUNK = 1 << 14  # 128 KiB a float64 column: a mapping of its own (memory.py)


class ColumnLog:
    """``lists``: one staging list per column (``names`` order, ``dtypes`` in the chunks)."""

    __slots__ = ("names", "dtypes", "lists", "_chunks", "_rows")

    def __init__(self, names: tuple[str, ...], dtypes: tuple) -> None:
        self.names = names
        self.dtypes = dtypes
        self.lists: tuple[list, ...] = tuple([] for _ in names)
        self._chunks: list[list[np.ndarray]] = [[] for _ in names]
        self._rows = 0

    def flush(self) -> None:
        n = len(self.lists[0])
        if not n:
            return
        for chunks, col, dt in zip(self._chunks, self.lists, self.dtypes):
            chunks.append(np.fromiter(col, dtype=dt, count=n))
            col.clear()
        self._rows += n

    def __len__(self) -> int:
        return self._rows + len(self.lists[0])

    def last(self, j: int, default=0.0):
        """The newest value of column ``j`` (``default`` when empty)."""
        if self.lists[j]:
            return self.lists[j][-1]
        return self._chunks[j][-1][-1].item() if self._chunks[j] else default

    def columns(self) -> dict[str, np.ndarray]:
        """The whole log, one array per column. Column by column, so a column's chunks are freed
        before the next one is joined (peak: the log plus one column)."""
        self.flush()
        out = {}
        for j, (c, dt) in enumerate(zip(self.names, self.dtypes)):
            chunks = self._chunks[j]
            out[c] = chunks[0] if len(chunks) == 1 else (np.concatenate(chunks) if chunks else np.empty(0, dtype=dt))
            self._chunks[j] = [out[c]] if len(out[c]) else []
        return out


STEP_COLUMNS = ("time_s", "step_s", "prefill_tokens", "running_batch", "kv_used", "queue_depth", "kv_cached")
STEP_DTYPES = (np.float64, np.float64, np.int32, np.int32, np.int32, np.int32, np.int32)


def step_log() -> ColumnLog:
    """An instance's per-step log (the record's STEP_COLUMNS): step start (s), step seconds,
    prefill tokens, decode batch, KV pages in use at the start, requests waiting, and of the pages
    in use those the prefix cache holds for reuse with no request referencing them (evictable:
    ``kv_used - kv_cached`` is the live KV of running requests)."""
    return ColumnLog(STEP_COLUMNS, STEP_DTYPES)


def time_log() -> ColumnLog:
    """One float64 column ``t`` (decode-step end times, s)."""
    return ColumnLog(("t",), (np.float64,))
