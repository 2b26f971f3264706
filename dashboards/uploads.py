"""Uploads for the Build tab, read safely, kept per session and bounded.

A dcc.Upload payload arrives base64-encoded in a callback request; the server refuses request
bodies over Flask's ``MAX_CONTENT_LENGTH`` before reading them (app.py), and the payload is
size-checked again before and after decoding. A scenario (.yaml) goes to the editor as text
(through pdsim's bounded YAML reader) and never touches the disk. A trace is written under a
generated name in this server's private upload folder (no client-supplied name or path reaches
the filesystem); a compressed one (gzip, bz2, xz, zstd: whatever the trace readers decompress) is
first measured, streaming, against size, ratio and time caps (expansion.py); then it is parsed
with pdsim's trace reader, so a bad file is reported with its line. Storing a trace is refused
when the session cannot be admitted (sessions.py: the server keeps state for a bounded number
of sessions and never takes another live session's place).

Uploads belong to the browser session that sent them: a session keeps at most
``uploads_per_session`` (a new one replaces the oldest), the folder holds at most
``upload_folder_bytes`` (the least recently uploaded go first), a file a run in progress reads
is deleted only after the run, a failed upload is deleted at once, a forgotten session's files
go with it, and the whole folder is removed when the server stops.
"""
from __future__ import annotations

import base64
import binascii
import copy
import shutil
import tempfile
import threading
import uuid
import zlib
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pdsim
from pdsim.specs import catalog
from pdsim.specs.yamlio import excerpt
from pdsim.workload.textio import compression

from .config import Limits
from .expansion import check_expansion
from .folders import TTLCache, walk

TRACE_SUFFIXES = (".jsonl", ".csv", ".json")


@dataclass(frozen=True)
class Upload:
    path: str
    sid: str
    name: str  # the client's file name, for display only
    size: int


def _display_name(filename: Any) -> str:
    name = Path(filename).name if isinstance(filename, str) and filename else "upload"
    return excerpt(name, 60).strip("'\"") if len(name) > 58 else name


def _mib(n: int, limit: int) -> str:
    """``n`` bytes in MiB with enough digits to differ from the ``limit`` it is compared with."""
    for digits in (1, 2, 3, 6):
        text = f"{n / 2**20:.{digits}f}"
        if float(text) * 2**20 > limit:
            return text
    return f"{n / 2**20}"


def decode_upload(contents: Any, filename: Any, limit: int) -> bytes:
    """A dcc.Upload payload (``data:...;base64,...``) decoded in memory, size-checked before
    decoding (from the base64 length) and after."""
    name = _display_name(filename)
    if not isinstance(contents, str) or "," not in contents:
        raise pdsim.SpecError("the upload is not a data URL (data:...;base64,...)", source=name)
    _header, b64 = contents.split(",", 1)
    if len(b64) > limit * 4 // 3 + 8:
        raise pdsim.SpecError(f"file is about {_mib(len(b64) * 3 // 4, limit)} MiB; the upload limit is "
                              f"{limit / 2**20:g} MiB", source=name)
    try:
        raw = base64.b64decode(b64, validate=True)
    except (ValueError, binascii.Error):
        raise pdsim.SpecError("the upload is not valid base64 data", source=name) from None
    if len(raw) > limit:
        raise pdsim.SpecError(f"file is {_mib(len(raw), limit)} MiB; the upload limit is {limit / 2**20:g} MiB",
                              source=name)
    return raw


class UploadStore:
    def __init__(self, limits: Limits | None = None, folder: Path | None = None,
                 in_use: Callable[[str], bool] = lambda path: False):
        self.limits = limits or Limits()
        if folder is None:
            self.folder = Path(tempfile.mkdtemp(prefix="pdsim-dashboard-uploads-"))
            self._owned = True
        else:
            self.folder = Path(folder)
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._owned = False
        self.folder = self.folder.resolve()
        self.in_use = in_use
        self.admit: Callable[[str], object] = lambda sid: sid  # sessions.admit, set by services.py
        self._files: OrderedDict[str, Upload] = OrderedDict()  # oldest first
        self._doomed: dict[str, int] = {}  # path -> size: to delete once no run reads them
        self._lock = threading.Lock()

    # ---- saving ------------------------------------------------------------------------------
    def save(self, sid: str, contents: Any, filename: Any) -> tuple[str, Any, int]:
        """Handle an upload of session ``sid``. A scenario (.yaml/.yml) comes back as text for
        the editor. A trace is stored and parsed. Returns ("scenario", text, 0) or ("trace",
        path, requests); SpecError (naming the client's file) when it cannot be used."""
        from pdsim.specs.yamlio import parse_yaml_text

        name = _display_name(filename)
        suffixes = [s.lower() for s in Path(name).suffixes]
        gz_name = bool(suffixes) and suffixes[-1] == ".gz"
        suffix = (suffixes[-2] if gz_name and len(suffixes) > 1 else suffixes[-1]) if suffixes else ""
        raw = decode_upload(contents, filename, self.limits.max_upload_bytes)
        comp = compression(raw[:8])
        if suffix in (".yaml", ".yml"):
            if comp:
                raise pdsim.SpecError(f"the file is {comp}-compressed; upload the plain YAML text", source=name)
            data = parse_yaml_text(raw, name)  # UTF-8, size, depth and alias limits
            if not isinstance(data, dict):
                raise pdsim.SpecError("expected a scenario: a mapping at the top level", source=name)
            return "scenario", raw.decode("utf-8-sig"), 0
        if suffix not in TRACE_SUFFIXES:
            raise pdsim.SpecError("expected a scenario (.yaml) or a trace: .jsonl (Mooncake), .csv (Azure/BurstGPT) "
                                  "or .json (bench result), optionally .gz", source=name)
        if gz_name and comp != "gzip":
            raise pdsim.SpecError("the name ends in .gz but the file is not gzip-compressed", source=name)
        self.admit(sid)
        self.collect()
        self._make_room(len(raw), name)
        path = self.folder / f"{uuid.uuid4().hex}{suffix}"
        try:
            path.write_bytes(raw)
            check_expansion(path, name, self.limits)  # before a reader decompresses it (SEC-C)
            table = _read_trace(path, name)
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        with self._lock:
            self._files[str(path)] = Upload(str(path), sid, name, len(raw))
            mine = [u for u in self._files.values() if u.sid == sid]
        for old in mine[:max(0, len(mine) - self.limits.uploads_per_session)]:
            self._release(old.path)
        return "trace", str(path), len(table)

    def _make_room(self, size: int, name: str) -> None:
        """Delete the oldest uploads not read by a run until ``size`` more bytes fit."""
        cap = self.limits.upload_folder_bytes
        with self._lock:
            used = sum(u.size for u in self._files.values()) + sum(self._doomed.values())
            victims = []
            for u in self._files.values():
                if used + size <= cap:
                    break
                if not self.in_use(u.path):
                    victims.append(u.path)
                    used -= u.size
        for p in victims:
            self._release(p)
        if used + size > cap:
            raise pdsim.SpecError(f"the server's upload space ({cap / 2**20:g} MiB) is in use by runs in progress; "
                                  "try again when they end", source=name)

    # ---- forgetting --------------------------------------------------------------------------
    def _release(self, path: str) -> None:
        """Forget an upload and delete its file, or mark it for deletion after the run reading it."""
        with self._lock:
            upload = self._files.pop(path, None)
            if self.in_use(path):
                self._doomed[path] = upload.size if upload is not None else 0
                return
        Path(path).unlink(missing_ok=True)

    def collect(self) -> None:
        """Delete the files marked for deletion that no run reads any more."""
        with self._lock:
            free = [p for p in self._doomed if not self.in_use(p)]
            for p in free:
                del self._doomed[p]
        for p in free:
            Path(p).unlink(missing_ok=True)

    def drop_session(self, sid: str) -> None:
        with self._lock:
            mine = [u.path for u in self._files.values() if u.sid == sid]
        for p in mine:
            self._release(p)

    def close(self) -> None:
        """Delete every upload (and the folder, when this store made it)."""
        with self._lock:
            paths = list(self._files) + list(self._doomed)
            self._files.clear()
            self._doomed.clear()
        for p in paths:
            Path(p).unlink(missing_ok=True)
        if self._owned:
            shutil.rmtree(self.folder, ignore_errors=True)

    # ---- listing -----------------------------------------------------------------------------
    def of_session(self, sid: str | None) -> list[Upload]:
        with self._lock:
            return [u for u in self._files.values() if u.sid == sid]

    def holds(self, sid: str) -> bool:
        """Whether session ``sid`` keeps an upload."""
        with self._lock:
            return any(u.sid == sid for u in self._files.values())

    def total_bytes(self) -> int:
        with self._lock:
            return sum(u.size for u in self._files.values())


def _read_trace(path: Path, name: str):
    """Parse an uploaded trace with pdsim's reader; every failure is a SpecError naming the
    client's file (never the server path)."""
    from pdsim.workload import read_trace

    try:
        return read_trace(path)
    except pdsim.SpecError as err:
        raise pdsim.SpecError(err.message, source=name, field=err.field) from None
    except (UnicodeDecodeError, ValueError, OSError, EOFError, zlib.error) as err:
        raise pdsim.SpecError(f"cannot read this trace: {type(err).__name__}", source=name) from None


_LISTINGS = TTLCache()


def data_folder_traces(data_dir: Path, limit: int = 200) -> list[str]:
    """Trace files in the data folder and its sub-folders (three levels, not inside sweep result
    folders, whose .json files are results), relative paths."""
    def scan() -> list[str]:
        out: list[str] = []
        for p, is_dir in walk(data_dir, 3, descend=lambda d: not (d / "results.csv").is_file()):  # not sweeps
            name = p.name.lower()
            if not is_dir and any(name.endswith(s) or name.endswith(s + ".gz") for s in TRACE_SUFFIXES):
                out.append(str(p.relative_to(data_dir)))
                if len(out) >= limit:
                    break
        return sorted(out)

    return list(_LISTINGS.get(("traces", str(data_dir), limit), scan))


def trace_options(store: UploadStore | None, sid: str | None, data_dir: Path | None,
                  current: str | None = None) -> list[dict]:
    """The trace-file choices: bundled traces, the data folder's, this session's uploads."""
    tdir = catalog.traces_dir()
    opts = [{"label": f"{p.name} (bundled)", "value": f"../traces/{p.name}"}
            for p in sorted(tdir.glob("*")) if p.suffix in TRACE_SUFFIXES]
    if data_dir is not None:
        opts += [{"label": f"{rel} (data folder)", "value": rel} for rel in data_folder_traces(data_dir)]
    if store is not None:
        opts += [{"label": f"{u.name} (uploaded)", "value": u.path} for u in store.of_session(sid)]
    if isinstance(current, str) and current and current not in {o["value"] for o in opts}:
        opts.append({"label": excerpt(current, 80).strip("'\""), "value": current})
    return opts


def use_trace(data: dict, path: str) -> dict:
    """Point the workload at a trace file, keeping the trace options already set."""
    data = copy.deepcopy(data)
    wl = data.get("workload") if isinstance(data.get("workload"), dict) else {}
    trace = wl.get("trace") if isinstance(wl.get("trace"), dict) else {}
    trace = {**trace, "path": path, "format": trace.get("format", "auto")}
    data["workload"] = {**wl, "kind": "trace", "trace": trace}
    return data
