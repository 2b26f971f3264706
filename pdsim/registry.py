"""Registries of plug-in classes (routers, schedulers, eviction policies...).

A scenario names a plug-in by its registry key or by ``package.module:ClassName`` for research
code outside the repository; the class is imported on demand.
"""
from __future__ import annotations

import importlib
from typing import Any, Callable, Generic, TypeVar

from .specs.errors import SpecError

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str):
        self.kind = kind
        self._items: dict[str, type[T]] = {}

    def register(self, key: str) -> Callable[[type[T]], type[T]]:
        def deco(cls: type[T]) -> type[T]:
            self._items[key] = cls
            return cls
        return deco

    def keys(self) -> list[str]:
        return sorted(self._items)

    def get(self, ref: str, field: str = "") -> type[T]:
        if ref in self._items:
            return self._items[ref]
        if ":" in ref:
            mod, _, name = ref.partition(":")
            try:
                module = importlib.import_module(mod)
            except ImportError as err:
                raise SpecError(f"cannot import {self.kind} plug-in module {mod!r}: {err}", field=field) from None
            cls = getattr(module, name, None)
            if cls is None:
                raise SpecError(f"module {mod!r} has no {self.kind} class {name!r}", field=field)
            return cls
        raise SpecError(f"unknown {self.kind} {ref!r}; expected one of {', '.join(self.keys())} "
                        f"or package.module:ClassName", field=field)

    def create(self, ref: str, field: str = "", **kwargs: Any) -> T:
        cls = self.get(ref, field)
        try:
            return cls(**kwargs)
        except TypeError as err:
            raise SpecError(f"{self.kind} {ref!r} rejected its parameters: {err}", field=field) from None
