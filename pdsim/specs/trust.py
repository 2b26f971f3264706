"""What a scenario may reach beyond pdsim's own data: plug-in modules and files.

A scenario is data, but two of its fields reach out: plug-in references (``module:Class``
imports code) and file references (hardware, model, trace paths read files). ``Trust`` is the
caller's decision about both, made once and checked when the scenario loads:

- ``Trust()`` (the CLI and API default): files anywhere the user can read; plug-ins only from
  pdsim's registries and installed entry points (group ``pdsim.plugins``) — ``module:Class`` is
  refused unless its module is in ``allow_plugins`` (``pdsim run --allow-plugin mypkg``).
- ``Trust.sandboxed(folder)`` (the dashboard, anything serving others): no ``module:Class`` at
  all, and files only inside ``folder`` or pdsim's bundled data.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .errors import SpecError
from .yamlio import excerpt


@dataclass(frozen=True)
class Trust:
    allow_plugins: tuple[str, ...] = ()  # module names (or package prefixes) allowed as module:Class
    data_roots: tuple[Path, ...] | None = None  # None: any path; else only inside these (and bundled data)

    @classmethod
    def sandboxed(cls, *roots: str | Path) -> "Trust":
        return cls((), tuple(Path(r).resolve() for r in roots))

    @property
    def sandbox(self) -> bool:
        return self.data_roots is not None

    def allows_module(self, module: str) -> bool:
        if self.sandbox:
            return False
        return any(module == a or module.startswith(a + ".") for a in self.allow_plugins)

    def check_path(self, path: Path, source: str | None, field: str) -> Path:
        """``path`` if this trust may read it, else a SpecError naming the field (never the file's content)."""
        if self.data_roots is None:
            return path
        from .catalog import bundled_roots

        real = path.resolve()
        for root in tuple(self.data_roots) + bundled_roots():
            if real == root or root in real.parents:
                return path
        raise SpecError(f"{excerpt(str(path), 80)} is outside the data folders this server may read "
                        "(upload the file, or use a bundled key)", source=source, field=field)
