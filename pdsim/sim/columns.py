"""Columnar logs: rows appended to plain Python lists (the cheapest append there is) and moved
into typed numpy chunks every ``CHUNK`` rows, so a long run keeps each value as 4 or 8 bytes
instead of a boxed Python number (~32 bytes) in a list. Used for the engine's step log and the
fabric's link-usage log.

The staging lists are cleared in place, so a hot loop may bind them once; it calls ``flush``
when ``len(lists[0]) >= CHUNK`` *before* appending, so the newest row always sits in the lists
(the engine may still correct the duration of the step in flight after a failure).

A log longer than ``SPILL_ROWS`` rows spills: its chunks go to one raw file per column in a
temporary folder instead of staying in memory (a 10M-request run logs ~160M engine steps, 5.8
GB of step columns), and ``columns()`` returns a ``SpilledColumns`` mapping that reads a column
from its file when asked (bit for bit the values written). The folder goes with the mapping.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from collections.abc import Mapping

import struct

import numpy as np

#: rows staged in lists before they move into a numpy chunk
CHUNK = 1 << 14  # 128 KiB a float64 column: a mapping of its own (memory.py)
#: a log of more rows than this keeps its chunks on disk (36 MiB of step columns in memory)
SPILL_ROWS = 1 << 20


#: struct codes of the column types: a staging list becomes a chunk through one ``struct.pack_into``
#: (a C loop converting each Python number, exact as ``np.fromiter`` at about half its cost)
_CODES = {np.dtype(np.float64): "d", np.dtype(np.int32): "i", np.dtype(np.int64): "q"}


def _chunk(values: list, dt) -> np.ndarray:
    """A typed numpy chunk of a staging list, bit for bit what ``np.fromiter`` gives (which
    takes over for a value ``struct`` refuses: a float in an integer column, one out of range)."""
    dt = np.dtype(dt)
    code = _CODES.get(dt)
    if code is not None:
        fmt = struct.Struct(f"={len(values)}{code}")
        if fmt.size == len(values) * dt.itemsize:
            buf = bytearray(fmt.size)
            try:
                fmt.pack_into(buf, 0, *values)
                return np.frombuffer(buf, dtype=dt)
            except struct.error:
                pass
    return np.fromiter(values, dtype=dt, count=len(values))


def spill_dir() -> str:
    """Where spilled logs go: ``PDSIM_SPILL_DIR`` if set, else the system temp folder."""
    return os.environ.get("PDSIM_SPILL_DIR") or tempfile.gettempdir()


class SpilledColumns(Mapping):
    """A log's columns kept in raw files (one per column, native byte order): ``m[name]``
    reads the whole column, ``m.part(name, lo, hi)`` rows ``lo:hi``; ``len(m)`` is the number
    of columns, ``m.rows`` of rows. Assigning a column keeps that array in memory instead.
    Pickles as a plain dict of arrays (for worker processes and saved results)."""

    def __init__(self, folder: str, names: tuple[str, ...], dtypes: tuple, rows: int) -> None:
        self.folder = folder
        self.dtypes = {c: np.dtype(dt) for c, dt in zip(names, dtypes)}
        self.rows = rows
        self._mem: dict[str, np.ndarray] = {}
        self._cleanup = weakref.finalize(self, shutil.rmtree, folder, True)

    def path(self, name: str) -> str:
        return os.path.join(self.folder, name + ".bin")

    def __getitem__(self, name: str) -> np.ndarray:
        if name in self._mem:
            return self._mem[name]
        dt = self.dtypes[name]  # KeyError for an unknown column, as a dict
        return np.fromfile(self.path(name), dtype=dt)

    def part(self, name: str, lo: int, hi: int | None) -> np.ndarray:
        """Rows ``lo:hi`` of a column, read alone."""
        if name in self._mem:
            return self._mem[name][lo:hi]
        dt = self.dtypes[name]
        lo, hi = max(lo, 0), self.rows if hi is None else min(hi, self.rows)
        return np.fromfile(self.path(name), dtype=dt, count=max(hi - lo, 0), offset=lo * dt.itemsize)

    def __setitem__(self, name: str, value: np.ndarray) -> None:
        self._mem[name] = value
        self.dtypes.setdefault(name, np.asarray(value).dtype)

    def __iter__(self):
        return iter(self.dtypes)

    def __len__(self) -> int:
        return len(self.dtypes)

    def __reduce__(self):
        return dict, ({c: self[c] for c in self.dtypes},)


def column_part(cols, name: str, lo: int = 0, hi: int | None = None) -> np.ndarray:
    """Rows ``lo:hi`` of column ``name`` of a dict of arrays or SpilledColumns (read alone)."""
    if isinstance(cols, SpilledColumns):
        return cols.part(name, lo, hi)
    return cols[name][lo:hi]


def column_rows(cols, name: str = "time_s") -> int:
    """Rows of a log's columns (a dict of arrays or SpilledColumns) without reading them."""
    if isinstance(cols, SpilledColumns):
        return cols.rows
    return len(cols.get(name, ()))


class ColumnLog:
    """``lists``: one staging list per column (``names`` order, ``dtypes`` in the chunks)."""

    __slots__ = ("names", "dtypes", "lists", "_chunks", "_rows", "_last", "_folder", "_files", "_spilled",
                 "spill_rows", "_cleanup", "__weakref__")

    def __init__(self, names: tuple[str, ...], dtypes: tuple, spill_rows: int | None = None) -> None:
        self.names = names
        self.dtypes = dtypes
        self.lists: tuple[list, ...] = tuple([] for _ in names)
        self._chunks: list[list[np.ndarray]] = [[] for _ in names]
        self._rows = 0
        self._last: tuple | None = None  # the newest flushed row (``last`` after a flush)
        self._folder: str | None = None
        self._files: list | None = None
        self._spilled: SpilledColumns | None = None
        self.spill_rows = SPILL_ROWS if spill_rows is None else spill_rows

    def flush(self) -> None:
        n = len(self.lists[0])
        if not n:
            return
        self._last = tuple(col[-1] for col in self.lists)
        for chunks, col, dt in zip(self._chunks, self.lists, self.dtypes):
            chunks.append(_chunk(col, dt))
            col.clear()
        self._rows += n
        if self._files is not None or self._rows > self.spill_rows:
            self._spill()

    def _spill(self) -> None:
        """Move the chunks in memory to the end of the column files (opened on first use)."""
        if self._files is None:
            self._folder = tempfile.mkdtemp(prefix="pdsim-log-", dir=spill_dir())
            # the folder goes with the log until a SpilledColumns mapping takes it over (columns()):
            # a run that ends by an exception or a signal the CLI turns into an exit leaves nothing
            self._cleanup = weakref.finalize(self, shutil.rmtree, self._folder, True)
            self._files = [open(os.path.join(self._folder, c + ".bin"), "wb") for c in self.names]
        for j, f in enumerate(self._files):
            for chunk in self._chunks[j]:
                chunk.tofile(f)
            self._chunks[j] = []

    def __len__(self) -> int:
        return self._rows + len(self.lists[0])

    def last(self, j: int, default=0.0):
        """The newest value of column ``j`` (``default`` when empty)."""
        if self.lists[j]:
            return self.lists[j][-1]
        if self._last is None:
            return default
        return np.asarray(self._last[j], dtype=self.dtypes[j]).item()

    def columns(self):
        """The whole log, one array per column (a dict), or a SpilledColumns mapping when the
        log spilled. In memory, column by column, so a column's chunks are freed before the
        next one is joined (peak: the log plus one column)."""
        self.flush()
        if self._files is not None:
            if self._spilled is None:
                for f in self._files:
                    f.close()
                self._spilled = SpilledColumns(self._folder, self.names, self.dtypes, self._rows)
                self._cleanup.detach()  # the mapping owns the folder now
            return self._spilled
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
