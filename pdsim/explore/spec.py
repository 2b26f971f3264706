"""Sweep specs: a base scenario, axes of scenario field paths, constraints, SLO, search mode,
objectives. Loaded strictly (unknown keys and wrong types name their field).

```yaml
name: my-sweep
base: ../scenarios/dsv3-h800-p4d9.yaml     # path (relative to this file) or bundled scenario key
set: {workload.num_requests: 5000}           # fixed overrides for every configuration
axes:
  - {field: cluster.decode.count, values: [1, 2]}
  - {field: workload.rate, range: {start: 10, stop: 40, step: 10}}          # 10, 20, 30, 40
  - {field: cluster.decode.engine.max_running_requests, range: {start: 64, stop: 1024, step: 2, log: true}}
  - name: prefill_layout                     # linked (zip): these fields move together
    linked: {cluster.prefill.nodes: [2, 4], cluster.prefill.dp: [16, 32], cluster.prefill.ep: [16, 32]}
constraints: {max_gpus: 104, max_nodes: 13}  # memory fit and divisibility are always checked
slo: {ttft_ms: 2000, tpot_ms: 50}            # optional: replaces the base scenario's per-request SLO
search: {mode: grid, target_goodput: 0.9}    # grid | random (samples, seed) | max_rate (see SearchSpec)
objectives:                                  # optional: what summary.json names a best configuration for
  - {metric: output_throughput_per_gpu, goal: max, min_goodput_share: 0.9}
  - {metric: p90_ttft_ms, goal: min}
report: {heatmap: {x: cluster.decode.count, y: prefill_layout, metric: request_goodput}}
max_configurations: 10000                    # refuse larger sweeps before building them
```

Which configurations compete: a configuration *meets the SLO* when it meets the search target
(``search.target_goodput`` of its requests meet the per-request SLO, and every
``search.limits`` bound holds); the Pareto frontiers and the best configurations are drawn
only from those, and only among configurations that ran the same workload (every swept
``workload.*`` field, such as the offered rate, splits the sweep into groups compared apart).
"""
from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..specs._convert import build, check, read_yaml
from ..specs.errors import SpecError
from ..specs.scenario import SLOSpec

# Per-configuration metrics (SGLang bench_serving names where they exist).
LATENCIES = [f"{s}_{m}_ms" for m in ("ttft", "itl", "tpot", "e2e_latency") for s in ("mean", "median", "p90", "p99")]
METRICS = (["goodput_share", "request_goodput", "goodput_per_gpu", "request_throughput", "output_throughput",
            "output_throughput_per_gpu", "tokens_per_s_per_user"] + LATENCIES
           + ["completed", "dropped", "preemptions", "duration"])
SEARCH_METRICS = ["max_rate", "max_rate_per_gpu", "probes", "search_note"]
# Columns derived from each configuration's cluster (not knobs, not simulated metrics).
LAYOUT = ["layout", "prefill_layout", "decode_layout", "gpus", "nodes", "prefill_gpus", "decode_gpus"]
OBJECTIVE_METRICS = sorted(set(METRICS + ["max_rate", "max_rate_per_gpu", "gpus", "nodes"]))
MAX_AXIS_VALUES = 100_000  # points of one axis
DEFAULT_MAX_CONFIGURATIONS = 10_000  # a sweep's configurations (each one or more simulations)


@dataclass(frozen=True)
class RangeSpec:
    """``start`` to ``stop`` (inclusive). Linear: ``step`` (additive) or ``num`` points. With
    ``log: true``: ``num`` points geometrically spaced, or ``step`` as a factor (> 1)."""

    start: float
    stop: float
    step: float | None = None
    num: int | None = None
    log: bool = False

    def __post_init__(self) -> None:
        check(self.stop >= self.start, f"must be >= start ({self.start})", "stop")
        check((self.step is None) != (self.num is None), "give exactly one of step or num", "step")
        check(self.num is None or self.num >= 1, "must be >= 1", "num")
        check(not self.log or self.start > 0, "a log range needs start > 0", "start")
        if self.step is not None:
            check(self.step > 1 if self.log else self.step > 0,
                  "a log range's step is a factor and must be > 1" if self.log else "must be > 0", "step")
        n = self.count()  # counted, not built: a step of 1e-9 must not allocate a billion values
        if n > MAX_AXIS_VALUES:
            raise SpecError(f"the range gives {n:,.0f} values; an axis takes at most {MAX_AXIS_VALUES:,} (use a "
                            "larger step or fewer points)", field="num" if self.num is not None else "step")

    def count(self) -> float:
        """How many values the range gives (a float: it may be astronomically large)."""
        if self.num is not None:
            return float(self.num)
        if self.log:
            return math.floor(math.log(self.stop / self.start) / math.log(self.step) + 1e-9) + 1.0
        return math.floor((self.stop - self.start) / self.step + 1e-9) + 1.0

    def values(self) -> list[int | float]:
        import numpy as np

        n = int(self.count())
        if self.num is not None:
            xs = np.geomspace(self.start, self.stop, self.num) if self.log else np.linspace(self.start, self.stop,
                                                                                             self.num)
        elif self.log:
            xs = self.start * self.step ** np.arange(n)
        else:
            xs = self.start + self.step * np.arange(n)
        xs = [float(x) for x in xs]
        integral = (all(float(v).is_integer() for v in (self.start, self.stop, self.step or 1))
                    and all(abs(x - round(x)) < 1e-9 for x in xs))
        return [int(round(x)) for x in xs] if integral else [round(x, 12) for x in xs]


@dataclass(frozen=True)
class AxisSpec:
    """One sweep dimension: a scenario ``field`` path with ``values`` or a ``range``, or
    ``linked`` fields that move together (equal-length lists, zipped). ``name`` labels it."""

    # Optional sub-specs are annotated without ``| None`` (default None) so that the strict
    # converter reports errors inside them (``axes[0].range.stop: ...``) rather than only
    # "expected a mapping or null" for the whole block.
    field: str | None = None
    values: tuple[Any, ...] | None = None
    range: RangeSpec = None  # type: ignore[assignment]
    linked: dict[str, tuple[Any, ...]] = None  # type: ignore[assignment]
    name: str | None = None

    def __post_init__(self) -> None:
        kinds = sum(x is not None for x in (self.values, self.range, self.linked))
        check(kinds == 1, "give exactly one of values, range or linked", "values")
        check(self.linked is None or self.field is None, "a linked axis names its fields inside linked:", "field")
        check(self.linked is not None or bool(self.field), "needs a field (a scenario field path)", "field")
        if self.linked is not None:
            check(len(self.linked) >= 1, "needs at least one field", "linked")
            lens = {len(v) for v in self.linked.values()}
            check(len(lens) == 1 and 0 not in lens,
                  "linked value lists must be non-empty and of equal length, got lengths "
                  + ", ".join(f"{k}: {len(v)}" for k, v in self.linked.items()), "linked")
        if self.values is not None:
            check(len(self.values) >= 1, "needs at least one value", "values")

    @property
    def label(self) -> str:
        return self.name or self.field or "+".join(self.linked or ())

    def size(self) -> int:
        """Points on this axis, without building them."""
        if self.linked is not None:
            return len(next(iter(self.linked.values())))
        return len(self.values) if self.values is not None else int(self.range.count())

    @property
    def fields(self) -> list[str]:
        return list(self.linked) if self.linked is not None else [self.field]

    def points(self) -> list[dict[str, Any]]:
        """Each point: {field path: value} for this axis."""
        if self.linked is not None:
            n = len(next(iter(self.linked.values())))
            return [{f: v[i] for f, v in self.linked.items()} for i in range(n)]
        vals = list(self.values) if self.values is not None else self.range.values()
        return [{self.field: v} for v in vals]


@dataclass(frozen=True)
class ConstraintSpec:
    """Configurations over these budgets are recorded as infeasible and not simulated. Memory
    fit and divisibility (TP/DP/EP against GPUs, experts, heads) are always checked."""

    max_gpus: int | None = None
    max_nodes: float | None = None

    def __post_init__(self) -> None:
        check(self.max_gpus is None or self.max_gpus >= 1, "must be >= 1", "max_gpus")
        check(self.max_nodes is None or self.max_nodes > 0, "must be > 0", "max_nodes")


@dataclass(frozen=True)
class SearchSpec:
    """How configurations are chosen and evaluated, and the target they must meet.

    - ``grid``: every combination of the axes' points.
    - ``random``: ``samples`` combinations of the grid, drawn without replacement with ``seed``.
    - ``max_rate``: every grid combination; for each, the highest value of ``rate_field`` in
      [``low``, ``high``] at which the target still holds, found by bisection on a geometric
      scale to a relative ``tolerance`` (see pdsim/explore/search.py for the monotone
      assumption). ``direction``: ``increasing`` when a larger value is a heavier load
      (``workload.rate``), ``decreasing`` when smaller is heavier (``workload.trace.time_scale``);
      ``auto`` picks by the field's name. The field must change the workload's arrivals (this is
      checked: a ``fixed_batch`` ignores ``workload.rate``).

    The target, in every mode: at least ``target_goodput`` of the requests meet the per-request
    SLO, and every ``limits`` bound holds (summary metric -> upper bound, e.g.
    ``{p90_ttft_ms: 2000, p90_itl_ms: 50}``: a percentile SLO). ``max_rate`` searches the load at
    which it holds; ``grid`` and ``random`` mark the configurations that miss it
    (``meets_slo`` false) and leave them out of the Pareto frontiers and the best
    configurations (``target_goodput: null`` and no ``limits``: every configuration competes).
    """

    mode: Literal["grid", "random", "max_rate"] = "grid"
    samples: int = 20
    seed: int = 0
    rate_field: str = "workload.rate"
    low: float = 0.5
    high: float = 64.0
    tolerance: float = 0.05
    target_goodput: float | None = 0.9
    limits: dict[str, float] = field(default_factory=dict)
    direction: Literal["auto", "increasing", "decreasing"] = "auto"

    def __post_init__(self) -> None:
        check(self.samples >= 1, "must be >= 1", "samples")
        check(0 < self.low < self.high, f"need 0 < low < high, got low {self.low}, high {self.high}", "low")
        check(0 < self.tolerance < 1, "must be in (0, 1)", "tolerance")
        check(self.target_goodput is None or 0 < self.target_goodput <= 1, "must be in (0, 1] or null",
              "target_goodput")
        for k, v in self.limits.items():
            if k not in LATENCIES:
                close = difflib.get_close_matches(k, LATENCIES, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise SpecError(f"unknown latency metric{hint}; expected one of {', '.join(LATENCIES)}",
                                field=f"limits.{k}")
            check(v > 0, f"must be > 0, got {v}", f"limits.{k}")
        check(self.mode != "max_rate" or self.target_goodput is not None or bool(self.limits),
              "max_rate needs a target: target_goodput and/or limits", "target_goodput")

    def target(self) -> dict:
        """The target a configuration must meet (``search.meets_target``'s argument)."""
        return {"target_goodput": self.target_goodput, "limits": dict(sorted(self.limits.items()))}

    @property
    def increasing(self) -> bool:
        if self.direction == "auto":
            return not self.rate_field.endswith("time_scale")
        return self.direction == "increasing"

    def params(self) -> dict:
        """What a configuration's evaluation depends on besides its scenario (hashed for the cache)."""
        if self.mode != "max_rate":
            return {"mode": "simulate"}
        return {"mode": "max_rate", "rate_field": self.rate_field, "low": self.low, "high": self.high,
                "tolerance": self.tolerance, "target_goodput": self.target_goodput,
                "limits": dict(sorted(self.limits.items())), "increasing": self.increasing}


@dataclass(frozen=True)
class ObjectiveSpec:
    """summary.json names the best configuration by ``metric`` (``goal`` max or min), among
    feasible configurations whose goodput share is at least ``min_goodput_share`` if given."""

    metric: str
    goal: Literal["max", "min"] = "max"
    min_goodput_share: float | None = None

    def __post_init__(self) -> None:
        if self.metric not in OBJECTIVE_METRICS:
            close = difflib.get_close_matches(self.metric, OBJECTIVE_METRICS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise SpecError(f"unknown metric{hint}; expected one of {', '.join(OBJECTIVE_METRICS)}", field="metric")
        check(self.min_goodput_share is None or 0 <= self.min_goodput_share <= 1, "must be in [0, 1]",
              "min_goodput_share")

    @property
    def label(self) -> str:
        return self.metric if self.min_goodput_share is None else f"{self.metric}@goodput>={self.min_goodput_share:g}"


DEFAULT_OBJECTIVES = (
    ObjectiveSpec("request_goodput"),
    ObjectiveSpec("goodput_per_gpu"),
    ObjectiveSpec("output_throughput_per_gpu", min_goodput_share=0.9),
    ObjectiveSpec("tokens_per_s_per_user", min_goodput_share=0.9),
    ObjectiveSpec("p90_ttft_ms", "min"),
)


# Columns a heatmap may span besides the axes: the deployment shape derived from each configuration.
HEATMAP_COLUMNS = ("layout", "prefill_layout", "decode_layout", "gpus", "nodes")


@dataclass(frozen=True)
class HeatmapSpec:
    """The report's heatmap: ``metric`` over ``x`` and ``y``, each an axis ``field`` (a linked
    axis by its ``name``) or a layout column (prefill_layout, decode_layout, layout, gpus,
    nodes). Unset: two varying axes that do not move together (P x D layouts when both vary)."""

    x: str | None = None
    y: str | None = None
    metric: str | None = None

    def __post_init__(self) -> None:
        check((self.x is None) == (self.y is None), "give both x and y, or neither", "y")
        check(self.x is None or self.x != self.y, "x and y must differ", "y")
        if self.metric is not None and self.metric not in OBJECTIVE_METRICS:
            close = difflib.get_close_matches(self.metric, OBJECTIVE_METRICS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise SpecError(f"unknown metric{hint}; expected one of {', '.join(OBJECTIVE_METRICS)}", field="metric")


@dataclass(frozen=True)
class ReportSpec:
    """What report.html shows (see HeatmapSpec)."""

    heatmap: HeatmapSpec = field(default_factory=HeatmapSpec)


@dataclass(frozen=True)
class SweepSpec:
    base: str
    axes: tuple[AxisSpec, ...] = ()
    set: dict[str, Any] = field(default_factory=dict)
    constraints: ConstraintSpec = field(default_factory=ConstraintSpec)
    slo: SLOSpec = None  # type: ignore[assignment]  # None: keep the base scenario's SLO
    search: SearchSpec = field(default_factory=SearchSpec)
    objectives: tuple[ObjectiveSpec, ...] = None  # type: ignore[assignment]  # None: the defaults
    report: ReportSpec = field(default_factory=ReportSpec)
    name: str = "sweep"
    description: str = ""
    # Every configuration is planned in memory (its full scenario) and simulated at least once:
    # a typo such as three 200-point ranges (8M configurations) must fail before building them.
    max_configurations: int = DEFAULT_MAX_CONFIGURATIONS

    def __post_init__(self) -> None:
        seen: dict[str, int] = {}
        for i, ax in enumerate(self.axes):
            for f in ax.fields:
                check(f not in seen, f"field {f!r} is already swept by axes[{seen.get(f)}]", f"axes[{i}].field")
                seen[f] = i
        if self.search.mode == "max_rate" and self.search.rate_field in seen:
            raise SpecError(f"{self.search.rate_field} is searched by max_rate; it cannot also be an axis",
                            field=f"axes[{seen[self.search.rate_field]}]")
        check(self.max_configurations >= 1, "must be >= 1", "max_configurations")
        n = self.configurations()
        if n > self.max_configurations:
            sizes = " x ".join(f"{ax.size():,}" for ax in self.axes)
            what = (f"{self.search.samples:,} samples" if self.search.mode == "random"
                    else f"the axes give {n:,} configurations ({sizes})")
            raise SpecError(f"{what}; a sweep runs at most {self.max_configurations:,} (each is planned in memory "
                            "and simulated); raise max_configurations in the sweep file to run more",
                            field="search.samples" if self.search.mode == "random" else "axes")
        hm = self.report.heatmap
        names = {"name": [ax.name for ax in self.axes if ax.name], "field": list(seen)}
        for key in ("x", "y"):
            v = getattr(hm, key)
            if v is not None and v not in seen and v not in names["name"] and v not in HEATMAP_COLUMNS:
                choices = list(seen) + names["name"] + list(HEATMAP_COLUMNS)
                close = difflib.get_close_matches(v, choices, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise SpecError(f"{v!r} is not an axis of this sweep{hint}; expected one of {', '.join(choices)}",
                                field=f"report.heatmap.{key}")

    def grid_size(self) -> int:
        """Combinations of the axes' points (an exact integer, however large)."""
        return math.prod(ax.size() for ax in self.axes)

    def configurations(self) -> int:
        """How many configurations the sweep plans."""
        total = self.grid_size()
        return min(total, self.search.samples) if self.search.mode == "random" else total

    def active_objectives(self) -> tuple[ObjectiveSpec, ...]:
        if self.objectives is not None:
            return self.objectives
        extra = (ObjectiveSpec("max_rate_per_gpu"), ObjectiveSpec("max_rate")) if self.search.mode == "max_rate" else ()
        return extra + DEFAULT_OBJECTIVES


def load_sweep(path: str | Path) -> tuple[SweepSpec, Path]:
    """Read and validate a sweep file; returns the spec and the folder relative paths start from."""
    p = Path(path)
    data = read_yaml(p)
    if not isinstance(data, dict):
        raise SpecError("expected a mapping at the top level", source=str(p))
    try:
        return build(SweepSpec, data), p.resolve().parent
    except SpecError as err:
        raise err.at(source=str(p)) from None
