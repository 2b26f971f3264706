"""Uploads for the Build tab, parsed safely, and the trace-file choices.

A dcc.Upload payload is decoded in memory with a size limit. A scenario (.yaml) goes to the
editor as text and never touches the disk; a trace is written under a generated name in a
private temp folder (no client-supplied name or path reaches the filesystem) and parsed with
pdsim's trace reader, so a bad file is reported with its line.
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pdsim
from pdsim.specs import catalog

from .forms import parse_yaml

UPLOADED: dict[str, str] = {}  # server temp path -> the client's file name (display only)


def trace_options(current: str | None = None) -> list[dict]:
    tdir = catalog.traces_dir()
    opts = [{"label": f"{p.name} (bundled)", "value": f"../traces/{p.name}"}
            for p in sorted(tdir.glob("*")) if p.suffix in (".jsonl", ".csv", ".json")]
    opts += [{"label": f"{name} (uploaded)", "value": path} for path, name in UPLOADED.items()]
    if current and current not in {o["value"] for o in opts}:
        opts.append({"label": str(current), "value": current})
    return opts


MAX_UPLOAD_BYTES = 20 * 2**20
TRACE_SUFFIXES = (".jsonl", ".csv", ".json")


def upload_dir() -> Path:
    import tempfile

    d = Path(tempfile.gettempdir()) / "pdsim-dashboard-uploads"
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    return d


def decode_upload(contents: str | None, filename: str | None) -> bytes:
    """A dcc.Upload payload (``data:...;base64,...``) decoded in memory, size-checked."""
    import base64
    import binascii

    name = Path(filename or "upload").name
    try:
        _header, b64 = (contents or "").split(",", 1)
        if len(b64) > MAX_UPLOAD_BYTES * 4 // 3 + 8:
            raise OverflowError
        raw = base64.b64decode(b64, validate=True)
    except OverflowError:
        raw = b"x" * (MAX_UPLOAD_BYTES + 1)
    except (ValueError, binascii.Error):
        raise pdsim.SpecError("the upload is not valid base64 data", source=name) from None
    if len(raw) > MAX_UPLOAD_BYTES:
        raise pdsim.SpecError(f"file is over the {MAX_UPLOAD_BYTES // 2**20} MiB upload limit", source=name)
    return raw


def save_upload(contents: str | None, filename: str | None) -> tuple[str, Any, int]:
    """Handle an upload. A scenario (.yaml/.yml) comes back as text for the editor and never
    touches the disk. A trace is written under a generated name in a private temp folder
    (the client's file name never reaches the filesystem) and parsed with pdsim's reader, so
    errors name the line. Returns ("scenario", text, 0) or ("trace", path, requests)."""
    from pdsim.workload import read_trace

    name = Path(filename or "upload").name
    suffix = Path(name).suffix.lower()
    raw = decode_upload(contents, filename)
    if suffix in (".yaml", ".yml"):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise pdsim.SpecError("a scenario must be UTF-8 text", source=name) from None
        parse_yaml(text)
        return "scenario", text, 0
    if suffix not in TRACE_SUFFIXES:
        raise pdsim.SpecError("expected a scenario (.yaml) or a trace: .jsonl (Mooncake), .csv (Azure/BurstGPT) "
                              "or .json (bench result)", source=name)
    import uuid

    path = upload_dir() / f"{uuid.uuid4().hex}{suffix}"
    path.write_bytes(raw)
    try:
        table = read_trace(path)
    except pdsim.SpecError as err:
        path.unlink(missing_ok=True)
        raise pdsim.SpecError(err.message, source=name, field=err.field) from None
    UPLOADED[str(path)] = name
    return "trace", str(path), len(table)


def use_trace(data: dict, path: str) -> dict:
    """Point the workload at a trace file, keeping the trace options already set."""
    data = copy.deepcopy(data)
    wl = data.get("workload") if isinstance(data.get("workload"), dict) else {}
    trace = wl.get("trace") if isinstance(wl.get("trace"), dict) else {}
    trace = {**trace, "path": path, "format": trace.get("format", "auto")}
    data["workload"] = {**wl, "kind": "trace", "trace": trace}
    return data
