"""How far a compressed upload expands, measured before any trace reader sees it.

pdsim's trace readers decompress by magic bytes (gzip of any number of members, bzip2 of any
number of streams, xz, zstd; workload/textio.py), so a 2 MB upload may hold 40 GiB (reliability
review SEC-C: ``bz2.compress(b"a" * 2**20, 9) * 40960`` kept a core busy 152 s). The upload is
decompressed here through the readers' own ``open_binary``, 1 MiB at a time and discarded, and
refused as soon as it passes a size cap (``max_expanded_bytes``, and ``max_expansion_ratio``
times its compressed size above ``expansion_floor_bytes``) or a time cap (``max_decompress_s``).
Memory stays at one chunk whatever the file holds.
"""
from __future__ import annotations

import time
from pathlib import Path

from pdsim.specs.errors import SpecError
from pdsim.workload import textio

from .config import Limits

CHUNK = 2**20


def expansion_cap(compressed: int, limits: Limits) -> int:
    """Bytes a ``compressed``-byte upload may expand to."""
    by_ratio = max(limits.expansion_floor_bytes, int(limits.max_expansion_ratio * compressed))
    return min(limits.max_expanded_bytes, by_ratio)


def _mib(n: float) -> str:
    return f"{n / 2**20:.3g} MiB"


def check_expansion(path: Path, name: str, limits: Limits) -> int:
    """Decompressed size of the upload stored at ``path`` (its size when not compressed);
    SpecError naming the client's file ``name`` when it expands too far, takes too long, or is
    not valid data of the compression its first bytes announce."""
    compressed = path.stat().st_size
    with open(path, "rb") as f:
        comp = textio.compression(f.read(8))
    if comp is None:
        return compressed
    cap = expansion_cap(compressed, limits)
    size, broken, t0 = 0, None, time.monotonic()
    try:
        with textio.open_binary(path) as stream:
            while size <= cap and time.monotonic() - t0 <= limits.max_decompress_s:
                chunk = stream.read(CHUNK)
                if not chunk:
                    return size
                size += len(chunk)
    except SpecError as err:  # the readers' own refusal (say a zstd codec missing)
        raise SpecError(err.message, source=name) from None
    except textio.read_errors() as err:
        broken = type(err).__name__
    if broken is not None:
        raise SpecError(f"the file starts like {comp} data but is not valid {comp} ({broken})", source=name)
    if size > cap:
        raise SpecError(f"the {comp} file expands to more than {_mib(cap)}; a compressed upload may expand to "
                        f"{limits.max_expansion_ratio:g} times its size (at least {_mib(limits.expansion_floor_bytes)}"
                        f", at most {_mib(limits.max_expanded_bytes)}): upload a smaller trace", source=name)
    raise SpecError(f"decompressing the {comp} file took more than {limits.max_decompress_s:g} s, the limit for "
                    "compressed uploads: upload a smaller trace", source=name)
