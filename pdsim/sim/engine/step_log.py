"""An instance's per-step log in columnar chunks (the record's STEP_COLUMNS).

The engine loop appends one row per step to plain Python lists (the cheapest append there
is); every ``CHUNK`` rows they are moved into typed numpy arrays, so a long run keeps 32 bytes
per step (float64 start and duration, int32 prefill tokens, running batch, KV pages in use and
queue depth) instead of ~200 bytes of boxed Python numbers. The lists are cleared in place:
the loop may bind them once.
"""
from __future__ import annotations

import numpy as np

#: rows staged in lists before they move into a numpy chunk
CHUNK = 4096

COLUMNS = ("time_s", "step_s", "prefill_tokens", "running_batch", "kv_used", "queue_depth")
DTYPES = (np.float64, np.float64, np.int32, np.int32, np.int32, np.int32)


class StepLog:
    """``t`` (step start, s), ``dur`` (step seconds), ``pf`` (prefill tokens), ``dec`` (decode
    batch), ``kv`` (KV pages in use at the start), ``queue`` (requests waiting): the staging
    lists; ``columns()`` returns the whole log as arrays."""

    __slots__ = ("t", "dur", "pf", "dec", "kv", "queue", "_chunks", "_rows")

    def __init__(self) -> None:
        self.t: list[float] = []
        self.dur: list[float] = []
        self.pf: list[int] = []
        self.dec: list[int] = []
        self.kv: list[int] = []
        self.queue: list[int] = []
        self._chunks: list[tuple[np.ndarray, ...]] = []
        self._rows = 0

    def flush(self) -> None:
        """Move the staged rows into a typed chunk (the loop calls this before appending, so
        the step in flight always stays in the lists: a failure may still cut its duration)."""
        lists = (self.t, self.dur, self.pf, self.dec, self.kv, self.queue)
        if not lists[0]:
            return
        self._chunks.append(tuple(np.fromiter(col, dtype=dt, count=len(col)) for col, dt in zip(lists, DTYPES)))
        self._rows += len(lists[0])
        for col in lists:
            col.clear()

    def __len__(self) -> int:
        return self._rows + len(self.t)

    @property
    def last_step_s(self) -> float:
        """Duration of the most recent step (0 before the first)."""
        if self.dur:
            return self.dur[-1]
        return float(self._chunks[-1][1][-1]) if self._chunks else 0.0

    def columns(self) -> dict[str, np.ndarray]:
        """The whole log, one array per column (COLUMNS order)."""
        self.flush()
        if not self._chunks:
            return {c: np.empty(0, dtype=dt) for c, dt in zip(COLUMNS, DTYPES)}
        out = {c: np.concatenate([ch[j] for ch in self._chunks]) for j, c in enumerate(COLUMNS)}
        self._chunks = [tuple(out[c] for c in COLUMNS)]
        return out


class TimeLog:
    """Float64 values (decode-step end times) staged in a list and moved into numpy chunks."""

    __slots__ = ("vals", "_chunks", "_rows")

    def __init__(self) -> None:
        self.vals: list[float] = []
        self._chunks: list[np.ndarray] = []
        self._rows = 0

    def flush(self) -> None:
        if self.vals:
            self._chunks.append(np.array(self.vals, dtype=np.float64))
            self._rows += len(self.vals)
            self.vals.clear()

    def __len__(self) -> int:
        return self._rows + len(self.vals)

    def array(self) -> np.ndarray:
        self.flush()
        out = np.concatenate(self._chunks) if self._chunks else np.empty(0)
        self._chunks = [out] if len(out) else []
        return out
