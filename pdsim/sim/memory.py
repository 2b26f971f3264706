"""The C heap under a long run (glibc only; elsewhere these do nothing).

A run's logs grow in numpy chunks and are joined into one array per column at the end. glibc
serves blocks under its mmap threshold from the heap, and raises that threshold as large blocks
are freed, so chunks land in the heap. When they are freed after the join, the heap keeps
their pages (it returns only a free top), and the process holds the log twice. Two calls fix
that: ``large_blocks_mapped`` pins the threshold so every chunk (``columns.CHUNK`` rows: 128 KiB
or more a column) gets its own mapping, which freeing returns to the system; ``release`` returns
the heap's free pages after a run (the objects of a finished world).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import gc

M_MMAP_THRESHOLD = -3  # mallopt parameter (malloc.h)
#: blocks at least this large get their own mapping (64 KiB: every log chunk, few of the
#: simulation's small objects)
MMAP_THRESHOLD = 64 << 10


def _glibc():
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt") else None


_LIBC = _glibc()


def large_blocks_mapped() -> None:
    """Pin glibc's mmap threshold at MMAP_THRESHOLD for the rest of the process."""
    if _LIBC is not None:
        _LIBC.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)


def release() -> None:
    """Collect garbage and return the heap's free pages to the system."""
    gc.collect()
    if _LIBC is not None:
        _LIBC.malloc_trim(0)
