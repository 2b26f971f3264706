"""``pdsim calibrate from-runs``: refit a deployment's constants from the user's own real runs.

The runs are anything ``pdsim validate`` reads (pdsim.ingest: ``pdsim replay`` output,
bench_serving / vLLM bench results, AIPerf, genai-bench, server request logs). Each run is
simulated exactly as ``pdsim validate`` does (pdsim.validate.align: the same requests, the same
send times or closed loop) under the scenario with candidate constants, and the constants are
moved (scipy ``least_squares``, trust-region, within bounds >= 0) to minimise the log error
log(simulated / real) of the gated metrics (mean and p90 of TTFT and ITL) over the fitted runs; a
run without token times (a server request log) contributes its mean and p90 end-to-end latency.

Only deployment-level constants are fitted, never the kernels (those come from microbenchmarks,
``pdsim calibrate fit``):

- ``efficiency.step_overhead_us``: host work per engine step (schedule, prepare inputs, sample);
- ``efficiency.seq_overhead_us``: host work per sequence per step (inputs, sampling, detokenise);
- ``efficiency.ctx_overhead_ns``: host work per context token of the decode batch per step;
- ``overheads.router_ms``: the request path outside the engine (HTTP, tokenise, stream), each way;
- ``transfer.setup_ms``: the fixed cost of one P->D KV transfer (P/D over Mooncake or NCCL);
- ``transfer.params.file_overhead_us``: the per-file cost of vLLM's shared-storage handoff.

Cross-validated: with ``--holdout RUN`` the fit never sees those runs and the report shows their
error as predicted; without, every run is predicted by a fit on the others (leave one run out)
and the constants written are the fit on all runs. A weak prior (PRIOR_WEIGHT on the change of
log(1 + value / scale), the fit's search coordinate) keeps a constant the runs do not constrain at its measured value
instead of letting it drift.

The output is a hardware profile overlay (specs/overlay.py: ``base:`` + the fitted efficiency
constants, each with its source) and the scenario-level constants as ``--set`` overrides, which
the overlay's header lists with the command to use it.
"""
from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..specs.errors import SpecError

METRICS = ("mean_ttft_ms", "p90_ttft_ms", "mean_itl_ms", "p90_itl_ms")
# a run without token times (server request logs): its end-to-end latency instead
E2E = ("mean_e2e_latency_ms", "p90_e2e_latency_ms")
PRIOR_WEIGHT = 0.05  # residual per unit of log(1 + value/scale): 1/20 of a 100% metric error


@dataclass(frozen=True)
class Param:
    """A fittable constant: its field path, where it lives, its scale (the search moves in
    units of it), its unit and what it stands for."""

    path: str
    where: str  # hardware | scenario
    scale: float
    unit: str
    what: str


PARAMS = {p.path: p for p in (
    Param("efficiency.step_overhead_us", "hardware", 1000.0, "us", "host work per engine step"),
    Param("efficiency.seq_overhead_us", "hardware", 50.0, "us", "host work per sequence per step"),
    Param("efficiency.ctx_overhead_ns", "hardware", 100.0, "ns", "host work per context token per step"),
    Param("overheads.router_ms", "scenario", 1.0, "ms", "request path outside the engine, each way"),
    Param("transfer.setup_ms", "scenario", 1.0, "ms", "fixed cost of one P->D KV transfer"),
    Param("transfer.params.file_overhead_us", "scenario", 10.0, "us",
          "per-file cost of the shared-storage KV handoff (P writes, D reads, a file per layer)"),
)}
SHORT = {p.rsplit(".", 1)[1]: p for p in PARAMS}  # step_overhead_us -> efficiency.step_overhead_us


def default_params(sc) -> list[str]:
    out = ["efficiency.step_overhead_us", "efficiency.seq_overhead_us", "efficiency.ctx_overhead_ns",
           "overheads.router_ms"]
    if sc.scenario.cluster.prefill and sc.scenario.transfer.backend in ("mooncake", "nccl"):
        out.append("transfer.setup_ms")
    if sc.scenario.cluster.prefill and sc.scenario.transfer.backend == "shared_storage":
        out.append("transfer.params.file_overhead_us")
    return out


def param_names(names: list[str] | None, sc) -> list[str]:
    if not names:
        return default_params(sc)
    out = []
    for n in names:
        full = n if n in PARAMS else SHORT.get(n)
        if full is None:
            raise SpecError(f"unknown constant {n!r}; expected some of {', '.join(PARAMS)}", field="--param")
        out.append(full)
    return list(dict.fromkeys(out))


def current_values(sc, names: list[str]) -> dict[str, float]:
    """The values the scenario runs with now (defaults where the scenario leaves them None)."""
    from ..costs.pd_overheads import ROUTER_MS
    from ..costs.transfer import MOONCAKE_SETUP_MS

    out = {}
    for n in names:
        if n.startswith("efficiency."):
            out[n] = float(getattr(sc.hardware.efficiency, n.split(".", 1)[1]))
        elif n == "overheads.router_ms":
            v = sc.scenario.overheads.router_ms if sc.scenario.overheads is not None else None
            out[n] = float(ROUTER_MS if v is None else v)
        elif n == "transfer.setup_ms":
            v = sc.scenario.transfer.setup_ms
            out[n] = float(MOONCAKE_SETUP_MS if v is None else v)
        elif n == "transfer.params.file_overhead_us":
            from ..sim.transports.shared_storage import SharedStorage

            v = sc.scenario.transfer.params.get("file_overhead_us")
            out[n] = float(SharedStorage.Params().file_overhead_us if v is None else v)
    return out


def with_values(sc, values: dict[str, float]):
    """The resolved scenario ``sc`` with these constants (every profile of the scenario)."""
    from ..specs.features import PDOverheadSpec

    eff = {k.split(".", 1)[1]: v for k, v in values.items() if k.startswith("efficiency.")}

    def hw(h):
        return dataclasses.replace(h, efficiency=dataclasses.replace(h.efficiency, **eff)) if eff else h

    s = sc.scenario
    if "overheads.router_ms" in values:
        s = dataclasses.replace(s, overheads=dataclasses.replace(s.overheads or PDOverheadSpec(),
                                                                 router_ms=values["overheads.router_ms"]))
    if "transfer.setup_ms" in values:
        s = dataclasses.replace(s, transfer=dataclasses.replace(s.transfer, setup_ms=values["transfer.setup_ms"]))
    if "transfer.params.file_overhead_us" in values:
        params = {**s.transfer.params, "file_overhead_us": values["transfer.params.file_overhead_us"]}
        s = dataclasses.replace(s, transfer=dataclasses.replace(s.transfer, params=params))
    out = dataclasses.replace(sc, scenario=s, hardware=hw(sc.hardware),
                              group_hardware={k: hw(h) for k, h in sc.group_hardware.items()})
    if s.transfer.params != sc.scenario.transfer.params:  # the transport's typed parameters, parsed again
        from ..sim.resolve import resolve_plugins
        from ..specs.trust import Trust

        out = dataclasses.replace(out, plugins=resolve_plugins(s, sc.trust or Trust()))
    return out


@dataclass
class Run:
    """One real run, ready to simulate: its requests (aligned table) and its measured metrics."""

    name: str
    path: str
    format: str
    table: object  # RequestTable
    real: dict[str, float]
    metrics: tuple[str, ...] = METRICS  # the ones this run measured (E2E for server logs)


def run_name(path: str) -> str:
    """A run's short name: its file name, or the folder that holds a `pdsim replay` bench.json."""
    p = Path(path)
    parts = [x for x in (p.parent.parent.name, p.parent.name) if x and x != "real"] if p.name == "bench.json" else []
    return parts[-1] if parts else p.name


def load_runs(paths: list[str], sc, arrivals: str = "auto") -> list[Run]:
    from ..ingest import read_run
    from ..metrics.results import Results
    from ..validate.align import workload_of
    from ..validate.prefix import with_prefix

    runs, names = [], set()
    for p in paths:
        ing = read_run(p)
        table, order, _ = workload_of(ing.record, arrivals)
        table, _ = with_prefix(table, ing.record.meta, order, sc)  # the cache hits the engine had
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a real run has no per-phase timestamps
            summary = Results(ing.record).summary()
        ok = [m for m in METRICS + E2E if isinstance(summary.get(m), (int, float)) and math.isfinite(summary[m])
              and summary[m] > 0]
        metrics = tuple(m for m in METRICS if m in ok) or tuple(m for m in E2E if m in ok)
        if not metrics:
            raise SpecError("the run has neither TTFT/ITL nor end-to-end latencies to fit to", source=str(p))
        real = {m: float(summary[m]) for m in metrics}
        name = run_name(p)
        if name in names:
            name = str(p)
        names.add(name)
        runs.append(Run(name, str(p), ing.format, table, real, metrics))
    return runs


def simulate_metrics(sc, run: Run) -> dict[str, float]:
    from .. import api

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        s = api.simulate(sc, table=run.table).summary()
    return {m: float(s.get(m) or float("nan")) for m in METRICS + E2E}


def log_errors(sim: dict[str, float], real: dict[str, float]) -> np.ndarray:
    """log(simulated / real) of every metric ``real`` holds; a simulated metric that came out
    empty counts as far off (log 10), never as a perfect fit."""
    return np.array([math.log(sim[m] / real[m]) if sim[m] > 0 and math.isfinite(sim[m]) else math.log(10.0)
                     for m in real])


@dataclass
class Fit:
    values: dict[str, float]
    cost: float
    evaluations: int
    status: str


def to_search(values: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """A constant v (>= 0) as the search coordinate z = log(1 + v / scale): a step of one moves
    it by its own scale near zero and by a factor e far above it, so an engine whose host work
    is 30x the profile's prior is one prior-weighted step of log(30) away, not 30 of them."""
    return np.log1p(values / scales)


def from_search(z: np.ndarray, scales: np.ndarray) -> np.ndarray:
    return scales * np.expm1(z)


def fit(sc, runs: list[Run], names: list[str], start: dict[str, float], max_evals: int = 40) -> Fit:
    """Least-squares constants over ``runs`` (see the module doc), starting from ``start``."""
    from scipy.optimize import least_squares

    scales = np.array([PARAMS[n].scale for n in names])
    z0 = to_search(np.array([start[n] for n in names]), scales)
    calls = [0]

    def resid(z):
        calls[0] += 1
        vals = {n: float(v) for n, v in zip(names, from_search(z, scales))}
        s = with_values(sc, vals)
        r = [log_errors(simulate_metrics(s, run), run.real) for run in runs]
        return np.concatenate(r + [PRIOR_WEIGHT * (z - z0)])

    # where to start: the profile's values, or the best of each constant alone moved 1-4 search
    # units up (up to ~50x its scale): a trust region started at the prior can stop on a shelf
    # where one constant trades against another (an eager engine hiding attention behind its
    # issue), far from a host whose work is tens of times the prior's
    def cost(z) -> float:
        r = resid(z)
        return float(r @ r)

    z_start, best = z0, cost(z0)
    for i in range(len(names)):
        for k in (1.0, 2.0, 3.0, 4.0):
            z = z0.copy()
            z[i] += k
            c = cost(z)
            if c < best:
                z_start, best = z, c
    # diff_step 5% of a search unit: a step the discrete-event results answer smoothly to; from the
    # profile's values and, where the scan found a better start, from there too: the better end
    starts = [z0] if z_start is z0 else [z0, z_start]
    r = min((least_squares(resid, z, bounds=(0.0, np.inf), method="trf", diff_step=0.05, x_scale=1.0,
                           max_nfev=max_evals, xtol=1e-3, ftol=1e-4) for z in starts), key=lambda x: x.cost)
    return Fit({n: float(v) for n, v in zip(names, from_search(r.x, scales))}, float(r.cost), calls[0],
               r.message)


@dataclass
class Row:
    run: str
    role: str  # fit | held-out | cross-validated | in-sample
    metric: str
    real: float
    before: float
    after: float

    @property
    def err_before(self) -> float:
        return (self.before - self.real) / self.real

    @property
    def err_after(self) -> float:
        return (self.after - self.real) / self.real


@dataclass
class Result:
    params: list[str]
    before: dict[str, float]
    after: dict[str, float]  # fitted on every run not held out
    rows: list[Row]
    fits: list[Fit]
    heldout: list[str]
    method: str  # holdout | leave-one-run-out | in-sample

    def mean_abs(self, role: str, which: str) -> float:
        rs = [r for r in self.rows if r.role == role]
        return float(np.mean([abs(r.err_before if which == "before" else r.err_after) for r in rs])) if rs else math.nan


def from_runs(sc, paths: list[str], holdout: list[str] | None = None, names: list[str] | None = None,
              max_evals: int = 40, arrivals: str = "auto") -> Result:
    """Fit the constants ``names`` (default_params) of the resolved scenario ``sc`` to the real
    runs ``paths``, cross-validated (module doc)."""
    if not paths:
        raise SpecError("give at least one real run", field="RUN")
    holdout = list(holdout or [])
    unknown = [h for h in holdout if h not in paths]
    if unknown:
        paths = paths + unknown  # a held-out run named only by --holdout is still a run
    names = param_names(names, sc)
    runs = load_runs(paths, sc, arrivals)
    held = {r.path for r in runs if r.path in holdout}
    train = [r for r in runs if r.path not in held]
    if not train:
        raise SpecError("every run is held out: nothing to fit on", field="--holdout")
    before = current_values(sc, names)
    before_metrics = {r.path: simulate_metrics(sc, r) for r in runs}
    rows: list[Row] = []
    fits = []
    main = fit(sc, train, names, before, max_evals)
    fits.append(main)
    main_sc = with_values(sc, main.values)

    def add(run: Run, role: str, after: dict[str, float]) -> None:
        for m in run.metrics:
            rows.append(Row(run.name, role, m, run.real[m], before_metrics[run.path][m], after[m]))

    if held:
        method = "holdout"
        for r in runs:
            add(r, "held-out" if r.path in held else "fit", simulate_metrics(main_sc, r))
    elif len(train) >= 2:
        method = "leave-one-run-out"
        for r in train:
            others = [o for o in train if o is not r]
            f = fit(sc, others, names, before, max_evals)
            fits.append(f)
            add(r, "cross-validated", simulate_metrics(with_values(sc, f.values), r))
    else:
        method = "in-sample"
        add(train[0], "in-sample", simulate_metrics(main_sc, train[0]))
    return Result(names, before, main.values, rows, fits, [r.name for r in runs if r.path in held], method)


def table_text(res: Result) -> str:
    """The before/after error table and the constants."""
    from ..validate.report import fmt

    lines = [f"  {'run':<34}{'role':<17}{'metric':<14}{'real':>9}{'before':>9}{'after':>9}"]
    for r in res.rows:
        lines.append(f"  {r.run[-34:]:<34}{r.role:<17}{r.metric:<14}{fmt(r.real):>9}{fmt(r.err_before, True):>9}"
                     f"{fmt(r.err_after, True):>9}")
    for role in dict.fromkeys(r.role for r in res.rows):
        lines.append(f"  mean |error| over {role} rows: before {res.mean_abs(role, 'before'):.1%}, "
                     f"after {res.mean_abs(role, 'after'):.1%}")
    return "\n".join(lines + constants_lines(res.params, res.before, res.after))


def constants_lines(params: list[str], before: dict[str, float], after: dict[str, float],
                    known: dict[str, Param] = PARAMS) -> list[str]:
    """The fitted constants, before -> after, with their units and meaning (``known``: the
    fittable constants by path; a table's last lines)."""
    lines = ["  constants (before -> fitted):"]
    for n in params:
        p = known[n]
        lines.append(f"    {n:<30}{before[n]:>10.4g} -> {after[n]:<10.4g} {p.unit:<3} ({p.what})")
    return lines


def overlay_text(res: Result, sc, hardware_ref: str, runs: list[str], out: Path) -> tuple[str, list[str]]:
    """(the overlay YAML, the --set overrides of the scenario-level constants)."""
    from .fitted_overlay import overlay_yaml

    held = res.mean_abs("held-out", "after") if res.method == "holdout" else res.mean_abs("cross-validated", "after")
    held_b = res.mean_abs("held-out", "before") if res.method == "holdout" else res.mean_abs("cross-validated",
                                                                                           "before")
    check = (f"{res.method}: mean |error| of the runs' latency metrics on runs the fit did not see {held:.1%} "
             f"(before {held_b:.1%})" if math.isfinite(held) else "in-sample only (one run, nothing held out)")
    fitted_on = ", ".join(run_name(r) for r in runs)
    eff = {n.split(".", 1)[1]: res.after[n] for n in res.params if PARAMS[n].where == "hardware"}
    sets = [f"{n}={res.after[n]:.4g}" for n in res.params if PARAMS[n].where == "scenario"]
    use = " ".join(["--set hardware=" + str(out)] + [f"--set {s}" for s in sets])
    head = ["Profile overlay written by `pdsim calibrate from-runs` (pdsim/calibrate/from_runs.py).",
            f"Fitted on: {fitted_on}" + (f"; held out: {', '.join(res.heldout)}" if res.heldout else ""),
            f"Check: {check}",
            f"Use: pdsim run SCENARIO {use}"]
    if sets:
        head.append("The scenario-level constants are not part of a hardware profile: pass them with --set "
                    "(or a validation case's set:)")
    source = f"pdsim calibrate from-runs ({{date}}) on {fitted_on}; {check}"
    return overlay_yaml(sc, hardware_ref, out, eff, source, head, held if math.isfinite(held) else None), sets
