"""JSON Schema (draft 2020-12) of pdsim's YAML specs, generated from the spec dataclasses.

The schema follows the strict converter (``_convert.build``): every dataclass is an object
with ``additionalProperties: false``, fields without a default are ``required``, ``Literal``
types are enums, ``X | None`` admits null, ``tuple[X, ...]`` is an array and
``dict[str, X]`` an object. A cluster role also accepts a single group mapping instead of a
list (``normalize_cluster``). Cross-field rules (divisibility, memory fit, ranges checked in
``__post_init__``) stay with pdsim's own validation; the schema is for editor completion,
hover text and structural checks.

Descriptions come from the class docstring, the field's trailing ``#`` comment (with its
``#   `` continuation lines) and ``- ``field``: text`` bullets of the class docstring.

Editors: put ``# yaml-language-server: $schema=<path>/docs/schema/scenario.json`` on the
first line of a scenario file (VS Code's YAML extension), or map the files in its settings.
``pdsim schema all --out docs/schema`` rewrites the committed files.
"""
from __future__ import annotations

import dataclasses
import inspect
import io
import re
import textwrap
import tokenize
import types
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

DRAFT = "https://json-schema.org/draft/2020-12/schema"
_PRIMITIVES = {int: {"type": "integer"}, float: {"type": "number"}, bool: {"type": "boolean"},
               str: {"type": "string"}}


def field_comments(cls: type) -> dict[str, str]:
    """Trailing ``#`` comments of a dataclass's fields, with ``#   `` continuation lines."""
    try:
        src = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    comments: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string[1:]
    lines = src.splitlines()
    names = {f.name for f in dataclasses.fields(cls)}
    out: dict[str, str] = {}
    current = None
    for no, line in enumerate(lines, start=1):
        m = re.match(r"^ {4}(\w+)\s*:", line)
        if m and m.group(1) in names:
            current = m.group(1)
            text = comments.get(no)
            out[current] = _clean_comment(text) if text and not line.lstrip().startswith("#") else ""
            continue
        stripped = line.strip()
        if current and stripped.startswith("#") and no in comments and comments[no].startswith("   "):
            out[current] = (out[current] + " " + comments[no].strip()).strip()  # a continuation line
            continue
        current = None
    return {k: v for k, v in out.items() if v}


def _clean_comment(text: str) -> str:
    text = re.sub(r"type:\s*ignore(\[[^\]]*\])?\s*", "", text)
    return text.replace("#", "").strip()


def docstring_bullets(cls: type) -> dict[str, str]:
    """``- ``name``: text`` (or ``- ``a`` / ``b``: text``) bullets of a class docstring,
    continuation lines joined."""
    doc = inspect.cleandoc(cls.__doc__ or "")
    out: dict[str, str] = {}
    names: list[str] = []
    for line in doc.splitlines():
        m = re.match(r"^-\s+((?:``\w+``(?:\s*/\s*)?)+)\s*:\s*(.*)$", line)
        if m:
            names = re.findall(r"``(\w+)``", m.group(1))
            for n in names:
                out[n] = m.group(2).strip()
            continue
        if names and line.startswith("  ") and line.strip():
            for n in names:
                out[n] += " " + line.strip()
            continue
        names = []
    return out


def _class_doc(cls: type) -> str:
    doc = cls.__doc__ or ""
    if doc.startswith(cls.__name__ + "("):  # the dataclass-generated signature is no description
        return ""
    return inspect.cleandoc(doc)


def _json_default(value: Any) -> tuple[bool, Any]:
    """(has a JSON form, that form) of a field default."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return True, value
    if isinstance(value, (tuple, list)) and all(isinstance(v, (bool, int, float, str)) for v in value):
        return True, list(value)
    if isinstance(value, dict) and not value:
        return True, {}
    return False, None


class SchemaBuilder:
    """Walks dataclasses into ``$defs``. ``examples``: {(class name, field): [values]} shown by
    editors as suggestions; ``extra``: {(class name, field): schema keywords} merged into a
    field's schema (an enum of metric names, ...)."""

    def __init__(self, examples: dict | None = None, extra: dict | None = None):
        self.defs: dict[str, dict] = {}
        self.examples = examples or {}
        self.extra = extra or {}

    def ref(self, cls: type) -> dict:
        name = cls.__name__
        if name not in self.defs:
            self.defs[name] = {}  # placeholder first: a recursive spec refers to itself
            self.defs[name] = self._object(cls)
        return {"$ref": f"#/$defs/{name}"}

    def _object(self, cls: type) -> dict:
        hints = get_type_hints(cls)
        comments = field_comments(cls)
        bullets = docstring_bullets(cls)
        props: dict[str, dict] = {}
        required = []
        for f in dataclasses.fields(cls):
            if not f.init:
                continue
            schema = dict(self.type_schema(hints[f.name]))
            desc = comments.get(f.name) or bullets.get(f.name)
            if desc:
                schema["description"] = desc
            if f.default is not dataclasses.MISSING:
                ok, value = _json_default(f.default)
                if ok and not (value is None and not _admits_null(schema)):
                    schema["default"] = value
            elif f.default_factory is dataclasses.MISSING:
                required.append(f.name)
            key = (cls.__name__, f.name)
            if key in self.examples:
                schema["examples"] = list(self.examples[key])
            schema.update(self.extra.get(key, {}))
            props[f.name] = schema
        out: dict[str, Any] = {"type": "object", "title": cls.__name__}
        doc = _class_doc(cls)
        if doc:
            out["description"] = doc
        out["properties"] = props
        if required:
            out["required"] = required
        out["additionalProperties"] = False
        return out

    def type_schema(self, tp: Any) -> dict:
        """The schema of a type annotation, as the converter accepts it."""
        origin = get_origin(tp)
        if tp is Any:
            return {}
        if tp in _PRIMITIVES:
            return dict(_PRIMITIVES[tp])
        if origin is Literal:
            values = list(get_args(tp))
            return {"enum": values}
        if dataclasses.is_dataclass(tp):
            return self.ref(tp)
        if origin in (Union, types.UnionType):
            arms = [a for a in get_args(tp) if a is not type(None)]
            schemas = [self.type_schema(a) for a in arms]
            if type(None) in get_args(tp):
                schemas.append({"type": "null"})
            return schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
        if origin in (tuple, list):
            args = get_args(tp)
            if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
                return {"type": "array", "items": self.type_schema(args[0])}
            if origin is list:
                return {"type": "array", "items": self.type_schema(args[0]) if args else {}}
            return {"type": "array", "prefixItems": [self.type_schema(a) for a in args],
                    "minItems": len(args), "maxItems": len(args)}
        if origin is dict:
            _kt, vt = get_args(tp)
            return {"type": "object", "additionalProperties": self.type_schema(vt)}
        raise TypeError(f"no JSON Schema for spec type {tp!r}")  # a new spec type: teach it here

    def document(self, cls: type, title: str, description: str) -> dict:
        root = self.ref(cls)
        return {"$schema": DRAFT, "title": title, "description": description, **root,
                "$defs": dict(sorted(self.defs.items()))}


def _admits_null(schema: dict) -> bool:
    return schema.get("type") == "null" or any(s.get("type") == "null" for s in schema.get("anyOf", ()))


def scenario_schema(examples: dict | None = None) -> dict:
    """The schema of a scenario YAML (``Scenario``); ``examples`` as in SchemaBuilder, e.g. the
    bundled hardware and model keys and the plug-in registries' keys."""
    from .scenario import ClusterSpec, GroupSpec, Scenario

    builder = SchemaBuilder(examples)
    doc = builder.document(Scenario, "pdsim scenario",
                           "A pdsim scenario: hardware, model, cluster (P/D groups or colocated), engine "
                           "knobs (SGLang server-argument names), router, KV transfer, workload, SLO, seed.")
    # a role holds a list of groups, or one group as a mapping (normalize_cluster)
    cluster = doc["$defs"][ClusterSpec.__name__]["properties"]
    group = builder.ref(GroupSpec)
    for role in ("prefill", "decode", "colocated"):
        listed = dict(cluster[role])
        default = listed.pop("default", None)
        cluster[role] = {"anyOf": [listed, group],
                         "description": f"{role} groups: a list, or one group as a mapping", "default": default}
    return doc


def bundled_examples() -> dict:
    """Suggestions for string fields that name bundled data (hardware, models, storage devices)."""
    from .catalog import hardware_keys, load_storage, model_keys

    return {("Scenario", "hardware"): hardware_keys(), ("Scenario", "model"): model_keys(),
            ("TierSpec", "device"): list(load_storage().devices)}
