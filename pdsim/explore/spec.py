"""Sweep specs: a base scenario, axes of scenario field paths, constraints, SLO, search mode.

```yaml
base: ../scenarios/dsv3-h800-p4d9.yaml     # path (relative to this file) or bundled key
set: {workload.num_requests: 5000}           # fixed overrides for every configuration
axes:
  - {field: cluster.decode.count, values: [1, 2]}
  - {field: workload.rate, range: {start: 10, stop: 40, step: 10}}
  - name: prefill_layout                     # linked: these fields move together
    linked: {cluster.prefill.nodes: [2, 4], cluster.prefill.dp: [16, 32], cluster.prefill.ep: [16, 32]}
constraints: {max_gpus: 104}
slo: {ttft_ms: 2000, tpot_ms: 50}            # optional: replaces the base scenario's SLO
search: {mode: grid}                         # grid | random (samples, seed) | max_rate
```
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ..specs._convert import check
from ..specs.scenario import SLOSpec


@dataclass(frozen=True)
class RangeSpec:
    start: float
    stop: float  # inclusive
    step: float | None = None
    num: int | None = None  # with log: true, num points geometrically spaced
    log: bool = False

    def __post_init__(self) -> None:
        check(self.stop >= self.start, "stop must be >= start", "stop")
        check((self.step is None) != (self.num is None), "give exactly one of step or num", "step")
        check(self.step is None or self.step > 0, "must be > 0", "step")
        check(self.num is None or self.num >= 1, "must be >= 1", "num")
        check(not self.log or self.start > 0, "a log range needs start > 0", "start")

    def values(self) -> list[float]:
        import numpy as np

        if self.num is not None:
            xs = np.geomspace(self.start, self.stop, self.num) if self.log else np.linspace(self.start, self.stop, self.num)
        else:
            xs = np.arange(self.start, self.stop + self.step * 1e-9, self.step)
        out = [float(x) for x in xs]
        return [int(x) if float(x).is_integer() and float(self.start).is_integer() and
                (self.step is None or float(self.step).is_integer()) else x for x in out]


@dataclass(frozen=True)
class AxisSpec:
    field: str | None = None
    values: tuple[Any, ...] | None = None
    range: RangeSpec | None = None
    linked: dict[str, tuple[Any, ...]] | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        kinds = sum(x is not None for x in (self.values, self.range, self.linked))
        check(kinds == 1, "give exactly one of values, range or linked", "values")
        check(self.linked is not None or bool(self.field), "needs a field (scenario field path)", "field")
        if self.linked is not None:
            lens = {len(v) for v in self.linked.values()}
            check(len(lens) == 1 and 0 not in lens, "linked value lists must be non-empty and of equal length", "linked")
        if self.values is not None:
            check(len(self.values) >= 1, "needs at least one value", "values")

    @property
    def label(self) -> str:
        return self.name or self.field or "+".join(self.linked)

    def points(self) -> list[dict[str, Any]]:
        """Each point: {field path: value} for this axis."""
        if self.linked is not None:
            n = len(next(iter(self.linked.values())))
            return [{f: v[i] for f, v in self.linked.items()} for i in range(n)]
        vals = list(self.values) if self.values is not None else self.range.values()
        return [{self.field: v} for v in vals]


@dataclass(frozen=True)
class ConstraintSpec:
    max_gpus: int | None = None
    max_nodes: float | None = None


@dataclass(frozen=True)
class SearchSpec:
    """``grid``: every combination; ``random``: ``samples`` of them (seeded); ``max_rate``: per
    configuration, bisect ``rate_field`` in [low, high] for the highest rate at which at least
    ``target_goodput`` of requests meet the SLO (assumes goodput falls as the rate rises)."""

    mode: Literal["grid", "random", "max_rate"] = "grid"
    samples: int = 20
    seed: int = 0
    rate_field: str = "workload.rate"
    low: float = 0.5
    high: float = 64.0
    tolerance: float = 0.05  # relative width at which bisection stops
    target_goodput: float = 0.9

    def __post_init__(self) -> None:
        check(self.samples >= 1, "must be >= 1", "samples")
        check(0 < self.low < self.high, "need 0 < low < high", "low")
        check(0 < self.tolerance < 1, "must be in (0, 1)", "tolerance")
        check(0 < self.target_goodput <= 1, "must be in (0, 1]", "target_goodput")


@dataclass(frozen=True)
class SweepSpec:
    base: str
    axes: tuple[AxisSpec, ...] = ()
    set: dict[str, Any] = field(default_factory=dict)
    constraints: ConstraintSpec = field(default_factory=ConstraintSpec)
    slo: SLOSpec | None = None
    search: SearchSpec = field(default_factory=SearchSpec)
    name: str = "sweep"
