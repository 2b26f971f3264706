"""The one YAML reader of pdsim (CLI, API, sweeps, dashboard): safe, bounded, strict.

Every spec file and every YAML text a user submits goes through ``parse_yaml_text`` (or
``read_yaml`` for files), which refuses, before building anything:
- input larger than ``MAX_BYTES``;
- text that is not UTF-8 (a leading byte-order mark is accepted and dropped);
- nesting deeper than ``MAX_DEPTH``;
- documents whose alias expansion would exceed ``MAX_NODES`` nodes (the "billion laughs" bomb:
  PyYAML shares aliased objects, but every consumer that walks the data pays the expansion);
- duplicate mapping keys (YAML's last-one-wins would hide a typo);
- any tag beyond YAML's plain types (``yaml.SafeLoader``: no Python objects).
Errors are SpecError naming the source and, where the parser knows it, the line.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from .errors import SpecError

MAX_BYTES = 4 * 2**20  # a scenario or sweep is a few KB; 4 MiB leaves room for inline tables
MAX_DEPTH = 64
MAX_NODES = 1_000_000


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that tracks nesting depth while composing and refuses duplicate keys."""

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent, index):  # noqa: D401 - PyYAML hook
        self._depth += 1
        if self._depth > MAX_DEPTH:
            mark = self.peek_event().start_mark
            raise SpecError(f"line {mark.line + 1}: nesting deeper than {MAX_DEPTH} levels")
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, int] = {}
        for key_node, _value_node in node.value:
            if isinstance(key_node, ScalarNode):
                key = self.construct_object(key_node, deep=deep)
                try:
                    if key in seen:
                        raise SpecError(f"line {key_node.start_mark.line + 1}: duplicate key {_excerpt(key)} "
                                        f"(first at line {seen[key]})")
                    seen[key] = key_node.start_mark.line + 1
                except TypeError:  # unhashable key: let PyYAML report it
                    pass
        return super().construct_mapping(node, deep=deep)


def _expanded_size(root: Node) -> int:
    """Nodes in the document with every alias expanded, computed without expanding (aliases
    share Node objects, so sizes are memoised by identity); stops counting past MAX_NODES."""
    memo: dict[int, int] = {}
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if key in memo:
            continue
        if isinstance(node, ScalarNode):
            memo[key] = 1
            continue
        children: list[Node] = []
        if isinstance(node, SequenceNode):
            children = list(node.value)
        elif isinstance(node, MappingNode):
            for k, v in node.value:
                children += [k, v]
        if done:
            total = 1
            for c in children:
                total += memo[id(c)]
                if total > MAX_NODES:
                    total = MAX_NODES + 1
                    break
            memo[key] = total
        else:
            stack.append((node, True))
            stack.extend((c, False) for c in children if id(c) not in memo)
    return memo[id(root)]


def _excerpt(value: Any, limit: int = 40) -> str:
    """A short, escaped rendering of user input for error messages (never a whole file)."""
    if isinstance(value, dict):
        return f"a mapping of {len(value)} keys"
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value)} items"
    r = repr(value)
    return r if len(r) <= limit else r[: limit - 1] + "…"


def excerpt(value: Any, limit: int = 40) -> str:
    """Public name of the error-message excerpt (see ``_excerpt``)."""
    return _excerpt(value, limit)


def parse_yaml_text(text: str | bytes, source: str = "<yaml>") -> Any:
    """Parse YAML text within the limits of this module; errors name ``source``."""
    if isinstance(text, bytes):
        if len(text) > MAX_BYTES:
            raise SpecError(f"input is {len(text) / 2**20:.1f} MiB; the limit is {MAX_BYTES // 2**20} MiB", source=source)
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as err:
            raise SpecError(f"not UTF-8 text (byte 0x{text[err.start]:02x} at offset {err.start}); "
                            "save the file as UTF-8", source=source) from None
    if len(text) > MAX_BYTES:
        raise SpecError(f"input is {len(text) / 2**20:.1f} MiB; the limit is {MAX_BYTES // 2**20} MiB", source=source)
    if text.startswith("\ufeff"):
        text = text[1:]
    loader = None
    try:
        # the loader's reader checks the characters on construction (a NUL raises here)
        loader = _BoundedLoader(text)
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded_size(node) > MAX_NODES:
            raise SpecError(f"the document expands to more than {MAX_NODES:,} nodes through aliases "
                            "(anchors & and aliases *); write it out plainly", source=source)
        return loader.construct_document(node)
    except SpecError as err:
        raise err.at(source=source) from None
    except yaml.reader.ReaderError as err:  # a NUL or other control character
        line = text.count("\n", 0, err.position) + 1
        ch = err.character if isinstance(err.character, int) else ord(str(err.character)[:1] or "\0")
        raise SpecError(f"line {line}: invalid YAML: character U+{ch:04X} is not allowed "
                        "(control characters other than tab and newline)", source=source) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise SpecError(f"{where}invalid YAML: {problem}", source=source) from None
    except RecursionError:
        raise SpecError(f"nesting too deep (the limit is {MAX_DEPTH} levels)", source=source) from None
    finally:
        if loader is not None:
            loader.dispose()


def read_yaml(path: str | Path) -> Any:
    """Read and parse a YAML file within the limits of this module; errors name the file."""
    p = Path(path)
    src = str(path)
    if len(src) > 4096:
        raise SpecError("file name longer than 4096 characters", source=src[:60] + "…")
    try:
        size = p.stat().st_size
        if size > MAX_BYTES:
            raise SpecError(f"file is {size / 2**20:.1f} MiB; the limit is {MAX_BYTES // 2**20} MiB", source=src)
        if not p.is_file():
            raise SpecError("not a regular file", source=src)
        data = p.read_bytes()
    except FileNotFoundError:
        raise SpecError("file not found", source=src) from None
    except OSError as err:
        raise SpecError(f"cannot read: {err.strerror}", source=src) from None
    return parse_yaml_text(data, src)
