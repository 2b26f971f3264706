"""One plug-in registry per kind (router, eviction policy, ...), behind one rule set.

A scenario names a plug-in by:
- a registry key (``round_robin``, ``lru``): pdsim's own;
- an entry point of the group ``pdsim.plugins`` declared by an installed package
  (``[project.entry-points."pdsim.plugins"] my-router = "mypkg.routers:MyRouter"``): installing a
  package is the act of trusting it, so these work everywhere, the dashboard included;
- ``package.module:ClassName``: only when the caller's ``Trust`` allows that module
  (``pdsim run --allow-plugin package``); never from a sandboxed caller such as the dashboard.
  The module is checked against the allow-list *before* it is imported.

Every plug-in class is a subclass of its kind's base class and declares ``Params``, a frozen
dataclass of its typed parameters; the scenario's ``params`` mapping is converted into it
when the scenario loads (errors name ``<field>.params.<name>``), so a bad parameter fails
before any workload is generated. Instances are created by the world with
``cls(params, **context)`` (context: e.g. the seeded ``rng``).
"""
from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Callable, ClassVar, Generic, TypeVar

from .specs._convert import build
from .specs.errors import SpecError
from .specs.trust import Trust
from .specs.yamlio import excerpt

T = TypeVar("T")
ENTRY_POINT_GROUP = "pdsim.plugins"


@dataclass(frozen=True)
class NoParams:
    """A plug-in without parameters."""


class Plugin:
    """Base of every plug-in class: ``Params`` holds its typed parameters."""

    Params: ClassVar[type] = NoParams

    def __init__(self, params: Any = None, **context: Any):
        self.params = params if params is not None else self.Params()


@dataclass(frozen=True)
class PluginRef:
    """A plug-in resolved at load time: its class, its built parameters and how it was named."""

    kind: str
    ref: str
    cls: type
    params: Any

    def create(self, **context: Any) -> Any:
        return self.cls(self.params, **context)


def _entry_points() -> dict[str, metadata.EntryPoint]:
    return {ep.name: ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}


class Registry(Generic[T]):
    def __init__(self, kind: str, base: type):
        self.kind = kind
        self.base = base
        self._items: dict[str, type] = {}

    def register(self, key: str) -> Callable[[type[T]], type[T]]:
        def deco(cls: type[T]) -> type[T]:
            self._check_class(cls, key, "")
            self._items[key] = cls
            return cls
        return deco

    def keys(self) -> list[str]:
        return sorted(self._items)

    def installed(self) -> list[str]:
        """Entry-point plug-ins of this kind from installed packages (loaded to check their kind)."""
        out = []
        for name, ep in sorted(_entry_points().items()):
            try:
                cls = ep.load()
            except Exception:  # noqa: BLE001 - a broken third-party package must not break listing
                continue
            if isinstance(cls, type) and issubclass(cls, self.base):
                out.append(name)
        return out

    def _check_class(self, cls: Any, ref: str, field: str) -> None:
        if not (isinstance(cls, type) and issubclass(cls, self.base)):
            raise SpecError(f"{excerpt(ref, 80)} is not a {self.kind} (a subclass of "
                            f"{self.base.__module__}.{self.base.__name__})", field=field)
        if cls is self.base:  # its methods raise NotImplementedError: a subclass must define them
            raise SpecError(f"{excerpt(ref, 80)} is the {self.kind} base class itself; name a subclass that "
                            "implements it", field=field)
        params = getattr(cls, "Params", None)
        if not (dataclasses.is_dataclass(params) and params.__dataclass_params__.frozen):
            raise SpecError(f"{self.kind} {excerpt(ref, 80)}: its Params must be a frozen dataclass", field=field)

    def get(self, ref: str, field: str = "", trust: Trust | None = None) -> type[T]:
        """The class named by ``ref`` (see the module docstring), checked to be of this kind."""
        trust = trust or Trust()
        if ref in self._items:
            return self._items[ref]
        eps = _entry_points()
        if ref in eps:
            try:
                cls = eps[ref].load()
            except Exception as err:  # noqa: BLE001 - report any failure of a third-party import
                raise SpecError(f"installed plug-in {ref!r} failed to load: {type(err).__name__}: "
                                f"{excerpt(str(err), 120)}", field=field) from None
            self._check_class(cls, ref, field)
            return cls
        if ":" in ref:
            mod, _, name = ref.partition(":")
            if not mod or not name or not all(p.isidentifier() for p in mod.split(".") + [name]):
                raise SpecError(f"malformed plug-in reference {excerpt(ref, 80)}; expected package.module:ClassName",
                                field=field)
            if not trust.allows_module(mod):
                how = ("plug-ins from modules are not accepted here; install the package with a "
                       f"'{ENTRY_POINT_GROUP}' entry point" if trust.sandbox else
                       f"allow it explicitly with --allow-plugin {mod.split('.')[0]} (the module is imported and runs)")
                raise SpecError(f"module {mod!r} is not an allowed plug-in source: {how}", field=field)
            try:
                module = importlib.import_module(mod)
            except ImportError as err:
                raise SpecError(f"cannot import {self.kind} plug-in module {mod!r}: {err}", field=field) from None
            cls = getattr(module, name, None)
            if cls is None:
                raise SpecError(f"module {mod!r} has no {self.kind} class {name!r}", field=field)
            self._check_class(cls, ref, field)
            return cls
        installed = [k for k in self.installed() if k not in self._items]
        raise SpecError(f"unknown {self.kind} {excerpt(ref, 80)}; expected one of "
                        f"{', '.join(self.keys() + installed)} or package.module:ClassName", field=field)

    def resolve(self, ref: str, params: dict | None, field: str, trust: Trust | None = None,
                params_field: str | None = None) -> PluginRef:
        """Class and typed parameters of ``ref``; errors name ``field`` / ``params_field``."""
        cls = self.get(ref, field, trust)
        pfield = params_field or f"{field}.params"
        if params and not dataclasses.fields(cls.Params):
            raise SpecError(f"{self.kind} {excerpt(ref, 80)} takes no parameters, got {', '.join(map(str, params))}",
                            field=pfield)
        try:
            built = build(cls.Params, params or {}, pfield)
        except SpecError as err:
            raise SpecError(f"{err.message} ({self.kind} {excerpt(ref, 80)})", field=err.field) from None
        return PluginRef(self.kind, ref, cls, built)
