"""Scenario <-> form helpers: which form control edits which scenario field, validation that
returns SpecError messages keyed by control, and safe parsing of uploaded traces."""
from __future__ import annotations

import base64
import copy
import tempfile
import uuid
from pathlib import Path
from typing import Any

import yaml

import pdsim
from pdsim.specs.catalog import scenarios_dir
from pdsim.specs.scenario import apply_overrides, normalize_cluster

MAX_UPLOAD_BYTES = 20 * 2**20
UPLOAD_DIR = Path(tempfile.gettempdir()) / "pdsim-dashboard-uploads"

# form control id -> scenario field path (first group of each role)
FIELDS: dict[str, str] = {
    "f-hardware": "hardware", "f-model": "model",
    "f-p-count": "cluster.prefill[0].count", "f-p-nodes": "cluster.prefill[0].nodes", "f-p-gpus": "cluster.prefill[0].gpus",
    "f-p-tp": "cluster.prefill[0].tp", "f-p-dp": "cluster.prefill[0].dp", "f-p-ep": "cluster.prefill[0].ep",
    "f-d-count": "cluster.decode[0].count", "f-d-nodes": "cluster.decode[0].nodes", "f-d-gpus": "cluster.decode[0].gpus",
    "f-d-tp": "cluster.decode[0].tp", "f-d-dp": "cluster.decode[0].dp", "f-d-ep": "cluster.decode[0].ep",
    "f-c-count": "cluster.colocated[0].count", "f-c-nodes": "cluster.colocated[0].nodes",
    "f-c-gpus": "cluster.colocated[0].gpus", "f-c-tp": "cluster.colocated[0].tp",
    "f-chunk": "cluster.{role}[0].engine.chunked_prefill_size",
    "f-mrr": "cluster.{role}[0].engine.max_running_requests",
    "f-page": "cluster.{role}[0].engine.page_size",
    "f-backend": "transfer.backend", "f-nic": "transfer.nic_gbit",
    "f-wl-kind": "workload.kind", "f-rate": "workload.rate", "f-nreq": "workload.num_requests",
    "f-ttft": "slo.ttft_ms", "f-tpot": "slo.tpot_ms", "f-seed": "seed",
}


def example_yaml(key: str) -> str:
    return (scenarios_dir() / f"{key}.yaml").read_text()


def parse_yaml(text: str) -> dict:
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark else ""
        raise pdsim.SpecError(f"{where}invalid YAML: {getattr(err, 'problem', err)}", source="scenario YAML") from None
    if not isinstance(data, dict):
        raise pdsim.SpecError("expected a mapping at the top level", source="scenario YAML")
    return normalize_cluster(data)


def _get(data: dict, path: str) -> Any:
    node: Any = data
    for part in path.replace("]", "").replace("[", ".").split("."):
        if isinstance(node, list):
            i = int(part)
            if i >= len(node):
                return None
            node = node[i]
        elif isinstance(node, dict):
            node = node.get(part)
        else:
            return None
        if node is None:
            return None
    return node


def role_of(data: dict) -> str:
    cl = data.get("cluster") or {}
    return "colocated" if cl.get("colocated") else "prefill"


def form_values(data: dict) -> dict[str, Any]:
    role = role_of(data)
    return {cid: _get(data, path.format(role=role)) for cid, path in FIELDS.items()}


def apply_form(data: dict, values: dict[str, Any]) -> dict:
    """Write the form's values into the scenario (empty = leave the field as it is)."""
    data = copy.deepcopy(data)
    role = role_of(data)
    cl = data.get("cluster") or {}
    over = {}
    for cid, value in values.items():
        if value is None or value == "":
            continue
        path = FIELDS[cid].format(role=role)
        grp = path.split(".")[1].split("[")[0] if path.startswith("cluster.") else None
        if grp and not cl.get(grp):
            continue  # no such group in this layout
        if _get(data, path) == value:
            continue
        over[path] = value
    # nodes and gpus are exclusive: setting one clears the other
    for key in list(over):
        for a, b in (("nodes", "gpus"), ("gpus", "nodes")):
            if key.endswith(f"].{a}"):
                grp = _get(data, key.rsplit(".", 1)[0])
                if isinstance(grp, dict):
                    grp.pop(b, None)
    return apply_overrides(data, over) if over else data


def control_for(field: str | None, data: dict) -> str | None:
    """The form control showing ``field`` (a SpecError field path), if any."""
    if not field:
        return None
    role = role_of(data)
    for cid, path in FIELDS.items():
        p = path.format(role=role)
        if field == p or field.startswith(p + "."):
            return cid
    for cid, path in FIELDS.items():  # a group-level error: show it at the group's count
        p = path.format(role=role)
        if cid.endswith("-count") and field == p.rsplit(".", 1)[0]:
            return cid
    return None


def validate(text: str, base_dir: Path | None = None):
    """(resolved scenario or None, message or None, control id or None)."""
    try:
        data = parse_yaml(text)
        resolved = pdsim.resolve_scenario(data, "scenario YAML", base_dir or scenarios_dir())
        return resolved, None, None
    except pdsim.SpecError as err:
        data = {}
        try:
            data = parse_yaml(text)
        except pdsim.SpecError:
            pass
        return None, str(err), control_for(err.field, data)


def save_upload(contents: str, filename: str | None) -> tuple[Path, int]:
    """Decode a dcc.Upload payload in memory, enforce the size limit, and write it under a
    generated name (the client's file name never reaches the filesystem). Returns (path,
    requests) after parsing it with pdsim's trace reader."""
    from pdsim.workload import read_trace

    try:
        _header, b64 = contents.split(",", 1)
        raw = base64.b64decode(b64, validate=True)
    except (ValueError, TypeError):
        raise pdsim.SpecError("the upload is not valid base64 data", source=filename or "upload") from None
    if len(raw) > MAX_UPLOAD_BYTES:
        raise pdsim.SpecError(f"file is {len(raw) / 2**20:.1f} MiB; the limit is {MAX_UPLOAD_BYTES // 2**20} MiB",
                              source=filename or "upload")
    suffix = {".jsonl": ".jsonl", ".csv": ".csv", ".json": ".json"}.get(Path(filename or "").suffix.lower())
    if suffix is None:
        raise pdsim.SpecError("expected a .jsonl (Mooncake), .csv (Azure/BurstGPT) or .json (bench result) trace",
                              source=filename or "upload")
    UPLOAD_DIR.mkdir(parents=True, exist_ok=True)
    path = UPLOAD_DIR / f"{uuid.uuid4().hex}{suffix}"
    path.write_bytes(raw)
    try:
        table = read_trace(path)
    except pdsim.SpecError as err:
        path.unlink(missing_ok=True)
        raise pdsim.SpecError(err.message.replace(str(path), ""), source=filename or "upload") from None
    return path, len(table)
