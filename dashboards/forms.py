"""Scenario <-> form for the dashboard's Build tab.

The YAML editor holds the scenario; the form is a view of it. Each form control edits one
scenario field (``FIELDS``: control id -> dotted field path, kind and placeholder derived from
the spec dataclasses, so the form follows pdsim/specs). Changing a control writes that one
field; emptying it removes the field (the spec default applies, shown as the placeholder) or,
for SLO bounds, sets it to null (not checked). Validation and error routing: validation.py.
Pure functions, no Dash: the callbacks and the tests call them.
"""
from __future__ import annotations

import copy
import dataclasses
import re
import types
from dataclasses import dataclass
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

import yaml

import pdsim
from pdsim.specs import catalog
from pdsim.specs.scenario import Scenario, normalize_cluster
from pdsim.specs.yamlio import excerpt

ROLES = {"p": "prefill", "d": "decode", "c": "colocated"}
LAYOUTS = ("disaggregated", "colocated")


@dataclass(frozen=True)
class Field:
    cid: str  # Dash component id
    path: str  # scenario field path ("" for the layout switch)
    label: str
    kind: str  # number | text | select | bool | layout
    options: tuple = ()
    default: Any = None  # shown as the placeholder
    clear: str = "remove"  # what emptying the control does: "remove" the key, or set it "null"
    section: str = "general"


def _unwrap(tp: Any) -> Any:
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        return _unwrap(args[0]) if len(args) == 1 else tp
    if origin is tuple:
        return _unwrap(get_args(tp)[0])
    return tp


def spec_type(path: str) -> tuple[Any, Any]:
    """(type, default) of a scenario field, walking the spec dataclasses."""
    cls, inst, tp, default = Scenario, None, Scenario, None
    parts = re.sub(r"\[\d+\]", "", path).split(".")
    for i, name in enumerate(parts):
        f = {x.name: x for x in dataclasses.fields(cls)}[name]
        tp = _unwrap(get_type_hints(cls)[name])
        if inst is not None:
            default = getattr(inst, name)
        elif f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            default = f.default_factory()  # type: ignore[misc]
        else:
            default = None
        if i < len(parts) - 1:
            cls, inst = tp, (default if dataclasses.is_dataclass(default) else None)
    return tp, default


def _field(cid: str, path: str, label: str, section: str, kind: str | None = None,
           clear: str = "remove") -> Field | None:
    try:
        tp, default = spec_type(path)
    except (KeyError, TypeError):  # a spec field renamed elsewhere: the YAML editor still has it
        return None
    options: tuple = ()
    if kind is None:
        if get_origin(tp) is Literal:
            kind, options = "select", tuple(get_args(tp))
        elif tp is bool:
            kind = "bool"
        elif tp in (int, float):
            kind = "number"
        else:
            kind = "text"
    if path == "cost_model":
        options = ("auto", "calibrated", "roofline")
    if isinstance(default, tuple) or dataclasses.is_dataclass(default):
        default = None
    return Field(cid, path, label, kind, options, default, clear, section)


GROUP_KNOBS = [  # (sub-path, label): the first group of each role is on the form
    ("count", "instances"), ("nodes", "nodes / instance"), ("gpus", "GPUs / instance"), ("tp", "tp"),
    ("dp", "dp (attention)"), ("ep", "ep"), ("enable_dp_attention", "DP attention"),
    ("engine.chunked_prefill_size", "chunked_prefill_size"), ("engine.max_prefill_tokens", "max_prefill_tokens"),
    ("engine.max_running_requests", "max_running_requests"), ("engine.max_total_tokens", "max_total_tokens"),
    ("engine.page_size", "page_size"), ("engine.mem_fraction_static", "mem_fraction_static"),
    ("engine.cuda_graph_max_bs", "cuda_graph_max_bs"), ("engine.ep_num_redundant_experts", "redundant experts"),
    ("engine.deepep_mode", "deepep_mode"), ("engine.kv_cache_dtype", "kv_cache_dtype"),
    ("engine.enable_two_batch_overlap", "two-batch overlap"), ("engine.disable_radix_cache", "no prefix cache"),
]


def _cid(short: str) -> str:
    return "f-" + short.replace(".", "-")


def _build_fields() -> list[Field]:
    out = [Field("f-layout", "", "layout", "layout", LAYOUTS, None, "remove", "general"),
           _field("f-name", "name", "name", "general"),
           _field("f-hardware", "hardware", "hardware profile", "general", "select"),
           _field("f-model", "model", "model", "general", "select"),
           _field("f-seed", "seed", "seed", "general"),
           _field("f-cost_model", "cost_model", "cost model", "general", "select"),
           _field("f-duration_limit_s", "duration_limit_s", "stop at (sim s)", "general")]
    for letter, role in ROLES.items():
        for sub, label in GROUP_KNOBS:
            out.append(_field(_cid(f"{letter}.{sub}"), f"cluster.{role}[0].{sub}", label, letter))
    out.append(_field("f-router-policy", "router.policy", "router", "transfer", "select"))
    for key, label in [("backend", "KV transfer backend"), ("mode", "mode"), ("batched", "batched (Mooncake)"),
                       ("nic_gbit", "NIC Gb/s (what-if)"), ("kv_buffer_fraction", "D receive buffer (HBM share)")]:
        out.append(_field(_cid(f"transfer.{key}"), f"transfer.{key}", label, "transfer"))
    for key, label in [("kind", "workload kind"), ("num_requests", "requests"), ("rate", "rate (req/s)"),
                       ("burstiness", "burstiness (1=Poisson)"), ("max_concurrency", "max_concurrency")]:
        out.append(_field(_cid(f"workload.{key}"), f"workload.{key}", label, "workload"))
    for io in ("input", "output"):
        for key in ("dist", "value", "mean", "std", "min", "max"):
            out.append(_field(_cid(f"workload.{io}.{key}"), f"workload.{io}.{key}", f"{io} {key}", "workload"))
    out.append(_field("f-workload-trace-path", "workload.trace.path", "trace file", "workload", "select"))
    for key, label in [("format", "trace format"), ("time_scale", "time_scale (<1 = heavier)"), ("limit", "first N")]:
        out.append(_field(_cid(f"workload.trace.{key}"), f"workload.trace.{key}", label, "workload"))
    for key in ("ttft_ms", "itl_ms", "max_itl_ms", "tpot_ms", "e2e_ms"):
        label = {"itl_ms": "SLO mean ITL ms", "max_itl_ms": "SLO worst ITL ms"}.get(key, f"SLO {key[:-3].upper()} ms")
        out.append(_field(_cid(f"slo.{key}"), f"slo.{key}", label, "slo", clear="null"))
    return [f for f in out if f is not None]


FIELDS: dict[str, Field] = {f.cid: f for f in _build_fields()}
FORM_IDS: list[str] = list(FIELDS)
SECTIONS = ["general", "p", "d", "c", "transfer", "workload", "slo"]
# an error at a field with no control of its own is shown at this control
ALIASES = {"workload.trace": "f-workload-trace-path", "cluster": "f-layout", "cluster.prefill": "f-layout",
           "cluster.decode": "f-layout", "cluster.colocated": "f-layout"}


def select_options(cid: str, current: Any = None) -> list[dict]:
    """Options of a select control (bundled keys; the current value is kept when custom)."""
    f = FIELDS[cid]
    if cid == "f-hardware":
        values = catalog.hardware_keys()
    elif cid == "f-model":
        values = catalog.model_keys()
    elif cid == "f-router-policy":
        from pdsim.sim.control.router import ROUTERS

        values = list(ROUTERS.keys())
    elif cid == "f-workload-trace-path":
        from .uploads import trace_options

        return trace_options(None, None, None, current)
    else:
        values = list(f.options)
    opts = [{"label": str(v), "value": v} for v in values]
    if current not in (None, "") and current not in values:
        opts.append({"label": str(current), "value": current})
    return opts


# ---- YAML text <-> data ----------------------------------------------------------------
def example_yaml(key: Any) -> str:
    """A bundled example scenario's text; only bundled keys (never a path sent by a client)."""
    if not isinstance(key, str) or key not in catalog.scenario_keys():
        raise pdsim.SpecError(f"no bundled example {excerpt(key)}", source="example")
    return catalog.scenario_path(key).read_text(encoding="utf-8")


def parse_yaml(text: Any, source: str = "scenario YAML") -> dict:
    """The editor's scenario text as data, through pdsim's bounded YAML reader (size, nesting,
    alias expansion, duplicate keys); SpecError when it is not a YAML mapping."""
    from pdsim.specs.yamlio import parse_yaml_text

    if text is None:
        text = ""
    if not isinstance(text, str):
        raise pdsim.SpecError(f"expected YAML text, got {type(text).__name__}", source=source)
    data = parse_yaml_text(text, source)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise pdsim.SpecError(f"expected a mapping at the top level, got {excerpt(data)}", source=source)
    return normalize_cluster(data)


def dump_yaml(data: dict) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=100)


def _split(path: str) -> list[str | int]:
    out: list[str | int] = []
    for part in path.split("."):
        m = re.fullmatch(r"([^\[]+)((?:\[\d+\])*)", part)
        out.append(m.group(1))
        out += [int(i) for i in re.findall(r"\[(\d+)\]", m.group(2))]
    return out


def get_path(data: Any, path: str) -> Any:
    node = data
    for key in _split(path):
        if isinstance(key, int):
            node = node[key] if isinstance(node, list) and key < len(node) else None
        else:
            node = node.get(key) if isinstance(node, dict) else None
        if node is None:
            return None
    return node


def has_path(data: Any, path: str) -> bool:
    keys = _split(path)
    parent = get_path(data, path.rsplit(".", 1)[0]) if "." in path else data
    return isinstance(parent, dict) and keys[-1] in parent


def set_path(data: dict, path: str, value: Any) -> bool:
    """Set a field, creating mappings on the way; False when a list index is missing."""
    keys = _split(path)
    node: Any = data
    for key, nxt in zip(keys, keys[1:]):
        if isinstance(key, int):
            if not isinstance(node, list) or key >= len(node):
                return False
            if not isinstance(node[key], dict):
                node[key] = {}
            node = node[key]
        else:
            if not isinstance(node.get(key), (dict, list)):
                node[key] = [] if isinstance(nxt, int) else {}
            node = node[key]
    node[keys[-1]] = value
    return True


def remove_path(data: dict, path: str) -> None:
    """Delete a field; mappings it leaves empty go too (a group entry stays)."""
    keys = _split(path)
    chain: list[tuple[Any, Any]] = []
    node: Any = data
    for key in keys[:-1]:
        nxt = node[key] if isinstance(node, list) and isinstance(key, int) and key < len(node) else (
            node.get(key) if isinstance(node, dict) else None)
        if nxt is None:
            return
        chain.append((node, key))
        node = nxt
    if isinstance(node, dict):
        node.pop(keys[-1], None)
    for parent, key in reversed(chain):
        child = parent[key]
        if isinstance(child, dict) and not child and not isinstance(parent, list):
            del parent[key]
        else:
            break


def layout_of(data: dict) -> str:
    cl = data.get("cluster") if isinstance(data.get("cluster"), dict) else {}
    return "colocated" if cl.get("colocated") and not (cl.get("prefill") or cl.get("decode")) else "disaggregated"


def set_layout(data: dict, layout: str) -> dict:
    """Switch disaggregated <-> colocated, seeding the new groups from the old first group."""
    if layout == layout_of(data):
        return data
    cl = data.get("cluster") if isinstance(data.get("cluster"), dict) else {}
    if layout == "colocated":
        first = (cl.get("prefill") or cl.get("decode") or [{"count": 1, "gpus": 1}])[0]
        data["cluster"] = {"colocated": [copy.deepcopy(first)]}
    else:
        first = (cl.get("colocated") or [{"count": 1, "gpus": 1}])[0]
        data["cluster"] = {"prefill": [copy.deepcopy(first)], "decode": [copy.deepcopy(first)]}
    return data


def form_values(data: dict) -> dict[str, Any]:
    """What each control shows: the field's value in the YAML (None = absent: placeholder)."""
    out: dict[str, Any] = {}
    for cid, f in FIELDS.items():
        if f.kind == "layout":
            out[cid] = layout_of(data)
            continue
        v = get_path(data, f.path)
        if f.kind == "bool":
            out[cid] = ["on"] if (v if v is not None else f.default) else []
        elif isinstance(v, (dict, list)):
            out[cid] = None
        elif f.clear == "null" and not has_path(data, f.path):
            out[cid] = f.default  # absent: the default bound applies; empty means null (not checked)
        else:
            out[cid] = v
    return out


def apply_changes(data: dict, changes: dict[str, Any]) -> dict:
    """Write changed controls into the scenario data (a copy)."""
    data = copy.deepcopy(data)
    for cid, value in changes.items():
        f = FIELDS[cid]
        if f.kind == "layout":
            data = set_layout(data, value or "disaggregated")
            continue
        if f.path.startswith("cluster.") and get_path(data, f.path.split("[0]")[0] + "[0]") is None:
            continue  # no group of that role in this layout
        if f.kind == "bool":
            value = bool(value)
        elif isinstance(value, str):
            value = value.strip()
        if value is None or value == "":
            if f.clear == "null":
                set_path(data, f.path, None)
            else:
                remove_path(data, f.path)
            continue
        for a, b in (("nodes", "gpus"), ("gpus", "nodes")):  # exclusive: one sizes the instance
            group = get_path(data, f.path[: -len(a) - 1]) if f.path.endswith(f"].{a}") else None
            if isinstance(group, dict) and b in group:  # swap the key in place, keeping the order
                data_group = {(a if k == b else k): v for k, v in group.items()}
                group.clear()
                group.update(data_group)
        set_path(data, f.path, value)
        if cid == "f-workload-trace-path":  # picking a trace means replaying it
            set_path(data, "workload.kind", "trace")
    return data


def group_notes(data: dict) -> dict[str, str]:
    cl = data.get("cluster") if isinstance(data.get("cluster"), dict) else {}
    notes = {}
    for letter, role in ROLES.items():
        n = len(cl.get(role) or [])
        notes[letter] = f"group 1 of {n} shown here; edit the others in the YAML" if n > 1 else ""
    return notes
