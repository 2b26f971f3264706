"""``run_sweep``: plan (validate every axis, count and expand, pre-check fit and constraints),
run what is not cached (serial, process pool or Ray), write the tables, frontiers, summary and
report.

Outputs in DIR:
- ``results.parquet`` / ``results.csv``: one row per configuration, in plan order: config_id,
  knob values (a linked axis also as one ``axis.<name>`` column), layout, status (ok |
  infeasible | error) and reason, metrics (SGLang bench_serving names: ``median_*`` is the
  p50), search results, ``meets_slo``, ``workload_group`` and the Pareto flags (see select.py).
- ``configs/<config_id>.yaml``: the full scenario of each configuration (``pdsim run`` loads it).
- ``pareto.csv`` (tokens/s/GPU vs tokens/s/user), ``pareto_goodput_ttft.csv``: per workload
  group, among configurations that meet the SLO.
- ``summary.json``: counts, the target, and the best configuration per objective (and group).
- ``report.html``: heatmap(s), Pareto scatters with knob hovers, the table.
- ``cache/<key>.json``: finished configurations (what makes a rerun resume; see fingerprint.py).
"""
from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any, Callable

import pandas as pd
import yaml

from ..specs.errors import SpecError
from ..specs.trust import Trust
from .compare import compare  # noqa: F401 - the top-level pair: run_sweep, compare
from .outdir import check_out_dir
from .plan import Plan, build_plan, config_id  # noqa: F401 - config_id re-exported
from .runner import Cache, run_jobs
from .select import best_per_objective, frontier_table, mark, workload_fields
from .spec import LAYOUT, METRICS, SEARCH_METRICS, SweepSpec, load_sweep

DERIVED = {"config_id", "status", "reason", "pareto", "pareto_goodput_ttft", "eval_wall_s", "wall_s", "meets_slo",
           "workload_group"}
NON_KNOBS = set(METRICS) | set(SEARCH_METRICS) | set(LAYOUT) | DERIVED


def knob_columns(df: pd.DataFrame) -> list[str]:
    """The columns of a results table that are swept knobs (axis field paths, ``axis.<name>``)."""
    return [c for c in df.columns if c not in NON_KNOBS]


_knob_columns = knob_columns  # the dashboard's name for it


def linked_column(name: str) -> str:
    """The results column that shows a linked axis' values together."""
    return f"axis.{name}"


def plan_sweep(sweep_path: str | Path, trust: Trust | None = None) -> Plan:
    """Load and validate a sweep file and list its configurations; simulates nothing."""
    spec, sdir = load_sweep(sweep_path)
    return build_plan(spec, sdir, str(sweep_path), trust)


def _write_configs(plan: Plan, out: Path) -> None:
    d = out / "configs"
    d.mkdir(parents=True, exist_ok=True)
    for cfg in plan.configs:
        p = d / f"{cfg.config_id}.yaml"
        text = yaml.safe_dump(cfg.data, sort_keys=False)
        if not p.is_file() or p.read_text() != text:
            tmp = d / f".{cfg.config_id}.yaml.tmp"
            tmp.write_text(text)
            os.replace(tmp, p)


def check_workers(workers: int | None) -> None:
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise SpecError(f"expected an integer >= 1 (or none for one per CPU), got {workers!r}", field="--workers")


def run_sweep(sweep_path: str | Path, out_dir: str | Path, workers: int | None = None, ray: bool = False,
              ray_address: str | None = None, resume: bool = True, progress: bool = True,
              on_row: Callable[[int, int], None] | None = None, trust: Trust | None = None,
              heatmap: tuple[str, str] | None = None) -> pd.DataFrame:
    """Run the sweep in ``sweep_path``, writing its outputs to ``out_dir``; returns the results
    table. Raises SpecError (naming file and axis) before simulating anything when the sweep
    is malformed. ``df.attrs`` tells ``computed`` (simulated now), ``cached`` (read back),
    ``infeasible`` and ``errors`` counts, and ``cache_warnings`` (unreadable cache files that
    were recomputed). ``on_row(done, total)`` follows progress. ``trust`` (specs/trust.py):
    which plug-in modules the configurations may import (``--allow-plugin``) and which files
    they may read; the default allows installed plug-ins only. ``heatmap``: the report's
    heatmap axes, overriding the sweep file's ``report.heatmap``."""
    check_workers(workers)
    trust = trust or Trust()
    spec, sdir = load_sweep(sweep_path)
    if heatmap is not None:
        spec = with_heatmap(spec, heatmap, str(sweep_path))
    plan = build_plan(spec, sdir, str(sweep_path), trust)
    out = check_out_dir(out_dir)
    _write_configs(plan, out)
    cache = Cache(out)
    rows: dict[str, dict] = {}  # cache key -> row
    cached = 0
    for cfg in plan.configs:
        if cfg.status != "pending" or cfg.cache_key in rows:
            continue
        hit = cache.get(cfg.cache_key) if resume else None
        if hit is not None:
            rows[cfg.cache_key] = hit
            cached += 1
    warned = list(cache.problems)
    for problem in warned:
        warnings.warn(problem, stacklevel=2)
    jobs, seen = [], set()
    for cfg in plan.configs:
        if cfg.status == "pending" and cfg.cache_key not in rows and cfg.cache_key not in seen:
            seen.add(cfg.cache_key)
            jobs.append((cfg.cache_key, cfg.data, str(plan.base_dir), plan.evaluation, trust))
    ids = {cfg.cache_key: cfg.config_id for cfg in plan.configs}
    finished = [0]

    def done(key: str, row: dict) -> None:
        rows[key] = row
        if row.get("status") != "error":  # errors are retried on the next run
            cache.put(key, row, ids[key])
        finished[0] += 1
        if on_row:
            on_row(finished[0], len(jobs))

    run_jobs(jobs, done, workers=workers, ray=ray, ray_address=ray_address, progress=progress)
    for problem in cache.problems[len(warned):]:
        warnings.warn(problem, stacklevel=2)
    df = assemble(plan, rows)
    summary = write_outputs(df, plan, out)
    df.attrs.update(computed=len(jobs), cached=cached, infeasible=summary["infeasible"], errors=summary["errors"],
                    cache_warnings=list(cache.problems))
    return df


def with_heatmap(spec: SweepSpec, axes: tuple[str, str], source: str) -> SweepSpec:
    """``spec`` with the report's heatmap over ``axes`` (the CLI's --heatmap X Y), validated."""
    from dataclasses import replace

    try:
        hm = replace(spec.report.heatmap, x=axes[0], y=axes[1])
        return replace(spec, report=replace(spec.report, heatmap=hm))
    except SpecError as err:
        raise SpecError(err.message, source=source, field="--heatmap") from None


def assemble(plan: Plan, rows: dict[str, dict]) -> pd.DataFrame:
    """One row per configuration in plan order, with its knobs, layout, metrics, SLO mark,
    workload group and frontier flags."""
    knob_names: list[str] = []
    linked = [ax for ax in plan.spec.axes if ax.linked is not None]
    for ax in plan.spec.axes:
        knob_names += ax.fields
    records = []
    searched = plan.evaluation.get("mode") == "max_rate"
    for cfg in plan.configs:
        rec: dict[str, Any] = {"config_id": cfg.config_id}
        rec.update({k: cfg.knobs.get(k) for k in knob_names})
        for ax in linked:
            rec[linked_column(ax.label)] = "/".join(_show(cfg.knobs.get(f)) for f in ax.fields)
        rec.update({k: cfg.layout.get(k) for k in LAYOUT})
        if cfg.status == "infeasible":
            res: dict[str, Any] = {"status": "infeasible", "reason": cfg.reason}
        else:
            res = rows[cfg.cache_key]
        rec["status"], rec["reason"] = res.get("status"), res.get("reason")
        rec.update({m: res.get(m) for m in METRICS})
        if searched:
            rec.update({m: res.get(m) for m in SEARCH_METRICS})
        rec["eval_wall_s"] = res.get("eval_wall_s")
        records.append(rec)
    df = pd.DataFrame.from_records(records)
    for m in METRICS + (["max_rate", "max_rate_per_gpu", "probes"] if searched else []) + ["eval_wall_s"]:
        df[m] = pd.to_numeric(df[m], errors="coerce")
    return mark(df, workload_fields([ax.fields for ax in plan.spec.axes]), plan.spec.search.target())


def _show(v: Any) -> str:
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return f"{v:g}" if isinstance(v, float) else str(v).lower() if isinstance(v, bool) else str(v)


def _py(v: Any) -> Any:
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and v != v:
        return None
    return v


def write_outputs(df: pd.DataFrame, plan: Plan, out: Path) -> dict:
    from ..report.sweep_figures import sweep_report

    spec = plan.spec
    knobs = knob_columns(df)
    df.to_csv(out / "results.csv", index=False)
    mixed = {c: "string" for c in df.columns if df[c].dtype == object}
    df.astype(mixed).to_parquet(out / "results.parquet", index=False)
    par = frontier_table(df, "pareto")
    par.to_csv(out / "pareto.csv", index=False)
    gt = frontier_table(df, "pareto_goodput_ttft")
    gt.to_csv(out / "pareto_goodput_ttft.csv", index=False)
    reasons: dict[str, int] = {}
    for r in df.loc[df["status"] == "infeasible", "reason"]:
        key = str(r).split(": ", 1)[-1] if r else "?"
        reasons[key] = reasons.get(key, 0) + 1
    ok = df["status"] == "ok"
    groups = [g for g in dict.fromkeys(df["workload_group"]) if g]
    summary = {
        "name": spec.name, "description": spec.description, "sweep": plan.source, "mode": spec.search.mode,
        "evaluation": plan.evaluation, "target": spec.search.target(), "configurations": int(len(df)),
        "ok": int(ok.sum()), "meets_slo": int(df["meets_slo"].sum()),
        "infeasible": int((df["status"] == "infeasible").sum()), "errors": int((df["status"] == "error").sum()),
        "knobs": knobs, "axes": [{"label": ax.label, "fields": ax.fields,
                                  "column": linked_column(ax.label) if ax.linked is not None else ax.field}
                                 for ax in spec.axes],
        "workload_groups": groups,
        "best": best_per_objective(df, spec.active_objectives(), knobs),
        "pareto": par["config_id"].tolist(),
        "pareto_goodput_ttft": gt["config_id"].tolist(),
        "infeasible_reasons": dict(sorted(reasons.items(), key=lambda kv: -kv[1])),
        "error_reasons": {r["config_id"]: r["reason"] for _i, r in df[df["status"] == "error"].iterrows()},
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=_py))
    hm = spec.report.heatmap
    sweep_report(df, par, knobs, str(out / "report.html"), title=spec.name, summary=summary,
                 heatmap=(_column(spec, hm.x), _column(spec, hm.y)) if hm.x else None, heatmap_metric=hm.metric)
    return summary


def _column(spec: SweepSpec, name: str | None) -> str | None:
    """The results column of a heatmap axis named by field, linked-axis name or layout column."""
    for ax in spec.axes:
        if ax.linked is not None and name == ax.name:
            return linked_column(ax.label)
    return name
