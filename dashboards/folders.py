"""Bounded listing of the data folder: the dashboard offers files and sweep results found
there as choices instead of asking for typed server paths. The walk visits at most
``max_entries`` directory entries, skips hidden folders and never follows a link out of the
root, and results are cached for a few seconds (the form asks on every edit)."""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

MAX_ENTRIES = 20_000
CACHE_S = 5.0


def walk(root: Path, max_depth: int, max_entries: int = MAX_ENTRIES,
         descend: Callable[[Path], bool] | None = None) -> Iterator[tuple[Path, bool]]:
    """(path, is_dir) under ``root`` breadth-first, depth <= ``max_depth`` (root's children are
    depth 1), sorted by name within a folder, stopping after ``max_entries`` entries; a folder
    for which ``descend`` says False is listed but not entered."""
    root = root.resolve()
    seen = 0
    level = [root]
    for _depth in range(max_depth):
        nxt: list[Path] = []
        for folder in level:
            try:
                with os.scandir(folder) as it:
                    entries = sorted(it, key=lambda e: e.name)
            except OSError:
                continue
            for e in entries:
                seen += 1
                if seen > max_entries:
                    return
                if e.name.startswith("."):
                    continue
                p = Path(e.path)
                try:
                    is_dir = e.is_dir()
                    if e.is_symlink():
                        real = p.resolve()
                        if real != root and root not in real.parents:
                            continue
                except OSError:
                    continue
                yield p, is_dir
                if is_dir and (descend is None or descend(p)):
                    nxt.append(p)
        level = nxt


class TTLCache:
    """A tiny time-bounded memo for folder listings (keyed by arguments, a few entries)."""

    def __init__(self, ttl_s: float = CACHE_S, size: int = 16):
        self.ttl_s, self.size = ttl_s, size
        self._data: dict[tuple, tuple[float, object]] = {}
        self._lock = threading.Lock()

    def get(self, key: tuple, make: Callable[[], object]) -> object:
        now = time.monotonic()
        with self._lock:
            hit = self._data.get(key)
            if hit is not None and now - hit[0] < self.ttl_s:
                return hit[1]
        value = make()
        with self._lock:
            if len(self._data) >= self.size:
                self._data.pop(min(self._data, key=lambda k: self._data[k][0]))
            self._data[key] = (now, value)
        return value

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
