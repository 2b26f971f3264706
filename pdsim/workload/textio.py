"""A trace file as lines of text: compression from its magic bytes, UTF-8 per line, bounded lines.

- Compression is recognised from the file's first bytes, never its name (a gzip file called
  ``trace.jsonl`` is read compressed, a plain ``trace.jsonl.gz`` as text): gzip, bzip2 and xz
  with the standard library, zstd through pyarrow's codec. Archives (zip, tar) are refused with
  a hint, since they hold several files.
- Text is UTF-8; a leading byte-order mark is dropped. A byte that is not UTF-8 is kept as a
  surrogate escape (``errors="surrogateescape"``) so that the reader can name the line it is
  on (``bad_utf8``) instead of failing the whole file at an unknown position.
- ``LineReader`` never holds more than ``MAX_LINE_CHARS`` of one line: a longer line (say a
  1 GB file without newlines) is skipped in chunks and reported by its line number.
"""
from __future__ import annotations

import bz2
import gzip
import io
import lzma
import re
from pathlib import Path
from typing import IO, Iterator

from ..specs.errors import SpecError

# A Mooncake row of a 1M-token prompt (about 2,000 hash ids) is ~20 KB; a benchmark run with
# per-request details can be tens of MB on one JSONL line. 64 Mi characters bounds one line.
MAX_LINE_CHARS = 64 * 2**20

_SURROGATE = re.compile("[\udc80-\udcff]")


def compression(head: bytes) -> str | None:
    """The compression a file's first bytes announce (gzip, bz2, xz, zstd), or None."""
    if head[:2] == b"\x1f\x8b":
        return "gzip"
    if head[:3] == b"BZh":
        return "bz2"
    if head[:6] == b"\xfd7zXZ\x00":
        return "xz"
    if head[:4] == b"\x28\xb5\x2f\xfd":
        return "zstd"
    return None


def _archive(head: bytes) -> str | None:
    if head[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
        return "a zip archive"
    if head[257:262] == b"ustar":
        return "a tar archive"
    return None


def open_binary(path: Path) -> IO[bytes]:
    """The file's bytes, decompressed when its magic bytes say it is compressed."""
    raw = open(path, "rb")
    try:
        head = raw.read(512)
        raw.seek(0)
        kind = _archive(head)
        if kind:
            raise SpecError(f"{kind}; extract the trace file from it first", source=str(path))
        comp = compression(head)
        if comp == "gzip":
            return gzip.GzipFile(fileobj=raw, mode="rb")
        if comp == "bz2":
            return bz2.BZ2File(raw, "rb")
        if comp == "xz":
            return lzma.LZMAFile(raw, "rb")
        if comp == "zstd":
            return _zstd(raw, path)
        return raw
    except BaseException:
        raw.close()
        raise


def _zstd(raw: IO[bytes], path: Path) -> IO[bytes]:
    import pyarrow as pa

    if not pa.Codec.is_available("zstd"):  # pragma: no cover - pyarrow wheels ship zstd
        raise SpecError("zstd-compressed, and this pyarrow has no zstd codec; decompress it first "
                        "(zstd -d FILE)", source=str(path))
    return pa.CompressedInputStream(pa.PythonFile(raw, mode="r"), "zstd")


def open_text(path: Path) -> IO[str]:
    """A trace file as UTF-8 text lines (see the module doc): decompressed by magic bytes, BOM
    dropped, undecodable bytes kept as surrogate escapes for ``bad_utf8`` to report."""
    return io.TextIOWrapper(open_binary(Path(path)), encoding="utf-8-sig", errors="surrogateescape", newline="")


def bad_utf8(text: str) -> str | None:
    """None when ``text`` was valid UTF-8, else where it was not (``byte 0xe9 at column 12``)."""
    if text.isascii():
        return None
    m = _SURROGATE.search(text)
    if m is None:
        return None
    return f"not UTF-8 text (byte 0x{ord(m.group()) - 0xDC00:02x} at column {m.start() + 1}); save the file as UTF-8"


class LineReader:
    """Iterates the lines of a text stream, each at most ``limit`` characters (a longer one is
    skipped and yields ``"\\n"``; its number is in ``long``). ``lineno``: lines read so far."""

    def __init__(self, f: IO[str], limit: int = MAX_LINE_CHARS):
        self.f = f
        self.limit = limit
        self.lineno = 0
        self.long: set[int] = set()

    def __iter__(self) -> Iterator[str]:
        readline, limit = self.f.readline, self.limit
        while True:
            line = readline(limit + 1)
            if not line:
                return
            self.lineno += 1
            if len(line) > limit and not line.endswith("\n"):
                self.long.add(self.lineno)
                while True:  # skip the rest of the line without keeping it
                    rest = readline(2**20)
                    if not rest or rest.endswith("\n"):
                        break
                yield "\n"
                continue
            yield line

    def too_long(self, lineno: int) -> str | None:
        if lineno in self.long:
            return f"line longer than {self.limit // 2**20} Mi characters"
        return None


def read_errors() -> tuple[type[BaseException], ...]:
    """Exceptions of a broken or truncated (compressed) file, to turn into one SpecError."""
    import zlib

    errors: tuple[type[BaseException], ...] = (OSError, EOFError, zlib.error, lzma.LZMAError)
    try:
        import pyarrow as pa

        errors += (pa.ArrowException,)
    except ImportError:  # pragma: no cover
        pass
    return errors
