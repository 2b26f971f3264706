"""The one error type of the specs layer: it names the file, the field path and what was expected."""
from __future__ import annotations


class SpecError(ValueError):
    """A spec (hardware profile, model, scenario, workload, sweep) failed validation.

    ``str(err)`` reads ``"<file>: <field.path>: <message>"`` so that a user can find the
    offending line without a traceback, e.g.
    ``scenario.yaml: cluster.prefill[0].tp: 3 does not divide 8 GPUs per node``.
    """

    def __init__(self, message: str, *, source: str | None = None, field: str | None = None):
        self.source = source
        self.field = field
        self.message = message
        super().__init__(self._render())

    def _render(self) -> str:
        parts = [p for p in (self.source, self.field) if p]
        return ": ".join(parts + [self.message])

    def at(self, source: str | None = None, prefix: str | None = None) -> "SpecError":
        """Return a copy located in ``source`` with ``prefix`` prepended to the field path."""
        field = self.field
        if prefix:
            field = f"{prefix}.{field}" if field and not field.startswith("[") else f"{prefix}{field or ''}"
        return SpecError(self.message, source=source or self.source, field=field)
