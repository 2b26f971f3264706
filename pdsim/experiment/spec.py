"""Experiment specs: policies x workloads x deployments x seeds on one base scenario.

```yaml
name: my-experiment
base: ../scenarios/x.yaml           # scenario path (relative to this file) or bundled key
set: {workload.trace.duration_s: 300}  # fixed overrides for every run
baseline: round_robin               # the policy every other one is compared with (default: the first)
seeds: [0, 1, 2, 3, 4]              # replicates; each run of a replicate uses this scenario seed
replicate_set:                      # optional per-replicate overrides, one value per seed
  workload.trace.start_s: [0, 600, 1200, 1800, 2400]
policies:                           # what is compared
  - {name: round_robin, set: {router.policy: round_robin}}
  - {name: conductor, set: {router.policy: mooncake_conductor, router.params: {ttft_slo_ms: 5000}}}
workloads:                          # optional; ``load`` is the x axis of goodput-vs-load curves
  - {name: 1x, load: 1.0, set: {workload.trace.time_scale: 1.0}}
  - {name: 2x, load: 2.0, set: {workload.trace.time_scale: 0.5}}
deployments:                        # optional
  - {name: p4d2, set: {}}
metrics: [mean_ttft_ms, p99_ttft_ms, request_goodput]   # optional: the metrics the report tests
confidence: 0.95
```

Common random numbers: every policy of a replicate runs the same scenario seed and the same
``replicate_set`` values, so it sees the same arrivals and lengths (the workload is a function
of the seed and the workload fields alone); only the policy differs, and the paired
difference of a metric across replicates cancels the workload's own variance.

Override paths are scenario field paths as in ``pdsim run --set``; file paths they name
resolve against the base scenario's folder.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..specs._convert import build, check, read_yaml
from ..specs.errors import SpecError

# Per-run metrics tested by default (SGLang bench_serving names, then pdsim's).
DEFAULT_METRICS = ("mean_ttft_ms", "p90_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_itl_ms",
                   "mean_e2e_latency_ms", "request_goodput", "goodput_share", "request_throughput",
                   "prefill_tokens", "prefix_cache_hit_rate", "rejected_share")
MAX_RUNS = 100_000  # refuse larger experiments before building them
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$")


@dataclass(frozen=True)
class Arm:
    """A named set of scenario overrides: a policy, a workload or a deployment. ``load``
    (workloads only): the offered load in any unit, the x axis of goodput-vs-load plots."""

    name: str
    set: dict[str, Any] = field(default_factory=dict)
    load: float | None = None

    def __post_init__(self) -> None:
        check(bool(_NAME.match(self.name)), "names are 1-64 characters: letters, digits, . _ + - "
              f"(they name files and columns), got {self.name[:40]!r}", "name")


@dataclass(frozen=True)
class ExperimentSpec:
    name: str
    base: str
    policies: tuple[Arm, ...]
    baseline: str | None = None
    workloads: tuple[Arm, ...] = (Arm("default"),)
    deployments: tuple[Arm, ...] = (Arm("default"),)
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    set: dict[str, Any] = field(default_factory=dict)
    replicate_set: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    metrics: tuple[str, ...] = DEFAULT_METRICS
    confidence: float = 0.95
    description: str = ""

    def __post_init__(self) -> None:
        check(bool(_NAME.match(self.name)), f"1-64 characters: letters, digits, . _ + -, got {self.name[:40]!r}",
              "name")
        check(len(self.policies) >= 1, "give at least one policy", "policies")
        for what in ("policies", "workloads", "deployments"):
            arms = getattr(self, what)
            check(len(arms) >= 1, "give at least one (or leave it out)", what)
            names = [a.name for a in arms]
            dup = sorted({n for n in names if names.count(n) > 1})
            check(not dup, f"names must be unique, {dup[0] if dup else ''!r} appears twice", what)
        for i, a in enumerate(self.policies + self.deployments):
            check(a.load is None, "load is a workload's offered load; policies and deployments have none",
                  "policies" if i < len(self.policies) else "deployments")
        names = [p.name for p in self.policies]
        check(self.baseline is None or self.baseline in names,
              f"{self.baseline!r} is not a policy name; expected one of {', '.join(names)}", "baseline")
        check(len(self.seeds) >= 2, "confidence intervals need at least 2 replicates (seeds)", "seeds")
        check(len(set(self.seeds)) == len(self.seeds), "seeds must be distinct", "seeds")
        check(all(s >= 0 for s in self.seeds), "seeds must be >= 0", "seeds")
        for k, v in self.replicate_set.items():
            check(len(v) == len(self.seeds), f"give one value per seed ({len(self.seeds)}), got {len(v)}",
                  f"replicate_set.{k}")
        check(0.5 <= self.confidence < 1.0, "must be in [0.5, 1)", "confidence")
        check(len(self.metrics) >= 1, "give at least one metric", "metrics")
        n = self.runs
        check(n <= MAX_RUNS, f"{n:,} runs; at most {MAX_RUNS:,} per experiment", "seeds")

    @property
    def baseline_name(self) -> str:
        return self.baseline or self.policies[0].name

    @property
    def runs(self) -> int:
        return len(self.policies) * len(self.workloads) * len(self.deployments) * len(self.seeds)


def experiments_dir() -> Path:
    """The bundled experiments (workloads/experiments, shipped as package data)."""
    from ..specs.catalog import workloads_dir

    return workloads_dir() / "experiments"


def experiment_path(ref: str | Path) -> Path:
    """An experiment file, or the key of a bundled one (``mooncake-routing``)."""
    p = Path(ref)
    if p.is_file():
        return p
    cand = experiments_dir() / f"{ref}.yaml"
    if cand.is_file():
        return cand
    keys = sorted(f.stem for f in experiments_dir().glob("*.yaml") if _is_experiment(f))
    raise SpecError(f"experiment file not found; bundled experiments: {', '.join(keys) or 'none'}", source=str(ref))


def _is_experiment(path: Path) -> bool:
    try:
        data = read_yaml(path)
    except SpecError:
        return False
    return isinstance(data, dict) and "policies" in data


def load_experiment(path: str | Path) -> tuple[ExperimentSpec, Path]:
    """(spec, folder of the experiment file) of a path or bundled key; errors name the file
    and field."""
    p = experiment_path(path)
    data = read_yaml(p)
    if not isinstance(data, dict):
        raise SpecError("expected a mapping at the top level", source=str(p))
    try:
        spec = build(ExperimentSpec, data)
    except SpecError as err:
        raise err.at(source=str(p)) from None
    from .evaluate import check_metrics  # the metric names a run produces live with the evaluation

    try:
        check_metrics(spec.metrics)
    except SpecError as err:
        raise err.at(source=str(p)) from None
    return spec, p.resolve().parent
