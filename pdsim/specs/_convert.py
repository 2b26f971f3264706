"""Strict conversion of plain YAML data into frozen dataclasses.

Unknown keys, missing required keys and values of the wrong type raise :class:`SpecError`
naming the field path, so every spec file gets the same error quality.
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import types
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from . import aliases
from .errors import SpecError
from .yamlio import excerpt, read_yaml  # noqa: F401 - read_yaml re-exported for spec loaders

_HINTS: dict[type, dict[str, Any]] = {}
INT_LIMIT = 2**63  # integers must fit numpy's int64
MAX_STR = 4096  # characters in one string field (names, paths, descriptions)
MAX_ITEMS = 100_000  # entries of one list or mapping field


def _kind_matches(tp: Any, value: Any) -> bool:
    """Whether ``value`` has the shape of ``tp`` (so its conversion error is the one to report)."""
    origin = get_origin(tp)
    if dataclasses.is_dataclass(tp) or origin is dict:
        return isinstance(value, dict)
    if origin in (tuple, list):
        return isinstance(value, (list, tuple))
    if origin is Literal:
        return any(isinstance(value, type(a)) for a in get_args(tp))
    if tp in (int, float):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(tp, type) and isinstance(value, tp)


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = get_type_hints(cls)
    return _HINTS[cls]


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


def _describe(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(tp))
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    if origin in (tuple, list):
        return "a list"
    if origin is dict:
        return "a mapping"
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(a) for a in get_args(tp) if a is not type(None))
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(tp, str(tp))


def convert(tp: Any, value: Any, path: str) -> Any:
    """Convert ``value`` to type ``tp``; raise SpecError(field=path) when it does not fit."""
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        arms = [a for a in args if a is not type(None)]
        errors = []
        for arg in arms:
            try:
                return convert(arg, value, path)
            except SpecError as err:
                errors.append((arg, err))
        # report the arm the value was meant for (a mapping for a dataclass, ...), so an error
        # deep inside an optional block is not hidden behind "expected a mapping"
        for arg, err in errors:
            if _kind_matches(arg, value):
                raise err from None
        if value is None:
            raise SpecError(f"expected {_describe(tp)}, got null", field=path)
        raise SpecError(f"expected {_describe(tp)}, got {excerpt(value)}", field=path)
    if origin is Literal:
        if value not in get_args(tp):
            raise SpecError(f"expected {_describe(tp)}, got {excerpt(value)}", field=path)
        return value
    if dataclasses.is_dataclass(tp):
        return build(tp, value, path)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise SpecError(f"expected a list, got {excerpt(value)}", field=path)
        args = get_args(tp)
        if len(value) > MAX_ITEMS:
            raise SpecError(f"{len(value):,} items; at most {MAX_ITEMS:,} are accepted", field=path)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(convert(args[0], v, _join(path, i)) for i, v in enumerate(value))
        if len(args) != len(value):
            raise SpecError(f"expected a list of {len(args)} items, got {len(value)}", field=path)
        return tuple(convert(a, v, _join(path, i)) for i, (a, v) in enumerate(zip(args, value)))
    if origin is dict:
        if not isinstance(value, dict):
            raise SpecError(f"expected a mapping, got {excerpt(value)}", field=path)
        if len(value) > MAX_ITEMS:
            raise SpecError(f"{len(value):,} entries; at most {MAX_ITEMS:,} are accepted", field=path)
        kt, vt = get_args(tp)
        return {convert(kt, k, path): convert(vt, v, _join(path, str(k))) for k, v in value.items()}
    if tp is bool:
        if not isinstance(value, bool):
            raise SpecError(f"expected true or false, got {excerpt(value)}", field=path)
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and math.isfinite(value) and value.is_integer():
                value = int(value)
            else:
                raise SpecError(f"expected an integer, got {excerpt(value)}", field=path)
        if not -INT_LIMIT <= value < INT_LIMIT:
            raise SpecError(f"{excerpt(value)} is out of range (|value| < 2**63)", field=path)
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            if isinstance(value, str) and len(value) < 64:
                try:
                    value = float(value)  # YAML 1.1 reads "1e9" as a string
                except ValueError:
                    raise SpecError(f"expected a number, got {excerpt(value)}", field=path) from None
            else:
                raise SpecError(f"expected a number, got {excerpt(value)}", field=path)
        try:
            value = float(value)
        except OverflowError:
            raise SpecError(f"{excerpt(value)} is too large for a number", field=path) from None
        if not math.isfinite(value):
            raise SpecError(f"expected a finite number, got {value}", field=path)
        return value
    if tp is str:
        if not isinstance(value, str):
            raise SpecError(f"expected a string, got {excerpt(value)}", field=path)
        if len(value) > MAX_STR:
            raise SpecError(f"a string of {len(value):,} characters; at most {MAX_STR:,} are accepted", field=path)
        return value
    raise TypeError(f"unsupported spec type {tp!r} at {path}")  # programming error, not user input


def build(cls: type, data: Any, path: str = "") -> Any:
    """Build dataclass ``cls`` from mapping ``data``, strictly."""
    if isinstance(data, cls):
        return data
    if not isinstance(data, dict):
        raise SpecError(f"expected a mapping, got {excerpt(data)}", field=path or None)
    hints = _hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    kwargs = {}
    for key, value in data.items():
        if key not in fields:
            name = str(key)[:60]
            close = difflib.get_close_matches(name, fields, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            hint = f" ({alias})" if (alias := aliases.hint(cls, name, fields)) else hint  # vLLM & co. names
            raise SpecError(f"unknown field{hint}; expected one of {', '.join(sorted(fields))}",
                            field=_join(path, name))
        kwargs[key] = convert(hints[key], value, _join(path, key))
    for name, f in fields.items():
        if name not in kwargs and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise SpecError(f"missing required field ({_describe(hints[name])})", field=_join(path, name))
    try:
        return cls(**kwargs)
    except SpecError as err:
        raise err.at(prefix=path or None) from None


def check(cond: bool, message: str, field: str) -> None:
    """Raise SpecError(message, field) unless ``cond``; used in __post_init__ validators."""
    if not cond:
        raise SpecError(message, field=field)


def replace_path(data: dict, dotted: str, value: Any) -> None:
    """Set ``data[a][b][0][c] = value`` for ``dotted == 'a.b[0].c'`` (or 'a.b.0.c'); for --set."""
    tokens: list[str | int] = []
    for part in dotted.replace("]", "").replace("[", ".").split("."):
        if part == "":
            raise SpecError(f"malformed field path {dotted!r}", field=dotted)
        tokens.append(int(part) if part.isdigit() else part)
    node: Any = data
    for i, tok in enumerate(tokens[:-1]):
        here = ".".join(str(t) for t in tokens[: i + 1])
        if isinstance(tok, int):
            if not isinstance(node, list) or tok >= len(node):
                raise SpecError(f"no list item {tok} here", field=here)
            node = node[tok]
        else:
            if not isinstance(node, dict):
                raise SpecError("not a mapping", field=here)
            if tok not in node or node[tok] is None:
                node[tok] = {}
            node = node[tok]
    last = tokens[-1]
    if isinstance(last, int):
        if not isinstance(node, list) or last >= len(node):
            raise SpecError(f"no list item {last} here", field=dotted)
        node[last] = value
    else:
        if not isinstance(node, dict):
            raise SpecError("not a mapping", field=dotted)
        node[last] = value


def load_spec(cls: type, path: str | Path, wrap: str | None = None) -> Any:
    """Read a YAML file and build ``cls`` from it (under key ``wrap`` if given); errors name
    the file."""
    data = read_yaml(path)
    try:
        return build(cls, {wrap: data} if wrap else data)
    except SpecError as err:
        raise err.at(source=str(path)) from None
