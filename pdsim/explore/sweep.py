"""``run_sweep``: plan (validate every axis, expand, pre-check fit and constraints), run what is
not cached (serial, process pool or Ray), write the tables, frontiers, summary and report.

Outputs in DIR:
- ``results.parquet`` / ``results.csv``: one row per configuration, in plan order: config_id,
  knob values, layout, status (ok | infeasible | error) and reason, metrics, search results,
  Pareto flags.
- ``configs/<config_id>.yaml``: the full scenario of each configuration (``pdsim run`` loads it).
- ``pareto.csv`` (tokens/s/GPU vs tokens/s/user), ``pareto_goodput_ttft.csv``.
- ``summary.json``: counts and the best configuration per objective.
- ``report.html``: heatmap over the P x D layouts, Pareto scatters with knob hovers, the table.
- ``cache/<key>.json``: finished configurations (what makes a rerun resume).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
import yaml

from .compare import compare  # noqa: F401 - the top-level pair: run_sweep, compare
from .pareto import GOODPUT_TTFT, THROUGHPUT_USER, frontier, pareto_mask
from .plan import Plan, build_plan, config_id  # noqa: F401 - config_id re-exported
from .runner import Cache, run_jobs
from .spec import LAYOUT, METRICS, SEARCH_METRICS, SweepSpec, load_sweep

NON_KNOBS = set(METRICS) | set(SEARCH_METRICS) | set(LAYOUT) | {
    "config_id", "status", "reason", "pareto", "pareto_goodput_ttft", "eval_wall_s", "wall_s"}


def knob_columns(df: pd.DataFrame) -> list[str]:
    """The columns of a results table that are swept knobs (axis field paths)."""
    return [c for c in df.columns if c not in NON_KNOBS]


_knob_columns = knob_columns  # the dashboard's name for it


def plan_sweep(sweep_path: str | Path) -> Plan:
    """Load and validate a sweep file and list its configurations; simulates nothing."""
    spec, sdir = load_sweep(sweep_path)
    return build_plan(spec, sdir, str(sweep_path))


def _write_configs(plan: Plan, out: Path) -> None:
    d = out / "configs"
    d.mkdir(parents=True, exist_ok=True)
    for cfg in plan.configs:
        p = d / f"{cfg.config_id}.yaml"
        text = yaml.safe_dump(cfg.data, sort_keys=False)
        if not p.is_file() or p.read_text() != text:
            p.write_text(text)


def run_sweep(sweep_path: str | Path, out_dir: str | Path, workers: int | None = None, ray: bool = False,
              ray_address: str | None = None, resume: bool = True, progress: bool = True,
              on_row: Callable[[int, int], None] | None = None) -> pd.DataFrame:
    """Run the sweep in ``sweep_path``, writing its outputs to ``out_dir``; returns the results
    table. Raises SpecError (naming file and axis) before simulating anything when the sweep
    is malformed. ``df.attrs`` tells ``computed`` (simulated now), ``cached`` (read back),
    ``infeasible`` and ``errors`` counts. ``on_row(done, total)`` follows progress."""
    plan = plan_sweep(sweep_path)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
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
    jobs, seen = [], set()
    for cfg in plan.configs:
        if cfg.status == "pending" and cfg.cache_key not in rows and cfg.cache_key not in seen:
            seen.add(cfg.cache_key)
            jobs.append((cfg.cache_key, cfg.data, str(plan.base_dir), plan.evaluation))
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
    df = assemble(plan, rows)
    summary = write_outputs(df, plan, out)
    df.attrs.update(computed=len(jobs), cached=cached, infeasible=summary["infeasible"], errors=summary["errors"])
    return df


def assemble(plan: Plan, rows: dict[str, dict]) -> pd.DataFrame:
    """One row per configuration in plan order, with its knobs, layout and metrics."""
    knob_names: list[str] = []
    for ax in plan.spec.axes:
        knob_names += ax.fields
    records = []
    searched = plan.evaluation.get("mode") == "max_rate"
    for cfg in plan.configs:
        rec: dict[str, Any] = {"config_id": cfg.config_id}
        rec.update({k: cfg.knobs.get(k) for k in knob_names})
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
    ok = (df["status"] == "ok").to_numpy()
    for col, (x, y, mx) in (("pareto", THROUGHPUT_USER), ("pareto_goodput_ttft", GOODPUT_TTFT)):
        flag = np.zeros(len(df), dtype=bool)
        if ok.any():
            flag[ok] = pareto_mask(df.loc[ok, [x, y]].to_numpy(dtype=float), list(mx))
        df[col] = flag
    return df


def _py(v: Any) -> Any:
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and v != v:
        return None
    return v


def best_per_objective(df: pd.DataFrame, spec: SweepSpec, knobs: list[str]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    ok = df[df["status"] == "ok"]
    for obj in spec.active_objectives():
        if obj.metric not in ok:
            continue
        cand = ok if obj.min_goodput_share is None else ok[ok["goodput_share"] >= obj.min_goodput_share]
        cand = cand[cand[obj.metric].notna()]
        if cand.empty:
            continue
        idx = cand[obj.metric].idxmax() if obj.goal == "max" else cand[obj.metric].idxmin()  # first on ties
        r = df.loc[idx]
        out[obj.label] = {"metric": obj.metric, "goal": obj.goal, "min_goodput_share": obj.min_goodput_share,
                          "value": _py(r[obj.metric]), "config_id": r["config_id"], "layout": _py(r["layout"]),
                          "gpus": _py(r["gpus"]), "knobs": {k: _py(r[k]) for k in knobs},
                          "config": f"configs/{r['config_id']}.yaml"}
    return out


def write_outputs(df: pd.DataFrame, plan: Plan, out: Path) -> dict:
    from ..report.sweep_figures import sweep_report

    spec = plan.spec
    knobs = knob_columns(df)
    df.to_csv(out / "results.csv", index=False)
    mixed = {c: "string" for c in df.columns if df[c].dtype == object}
    df.astype(mixed).to_parquet(out / "results.parquet", index=False)
    ok = df[df["status"] == "ok"]
    par = frontier(ok, *THROUGHPUT_USER[:2])
    par.to_csv(out / "pareto.csv", index=False)
    frontier(ok, GOODPUT_TTFT[0], GOODPUT_TTFT[1], GOODPUT_TTFT[2]).to_csv(out / "pareto_goodput_ttft.csv",
                                                                             index=False)
    reasons: dict[str, int] = {}
    for r in df.loc[df["status"] == "infeasible", "reason"]:
        key = str(r).split(": ", 1)[-1] if r else "?"
        reasons[key] = reasons.get(key, 0) + 1
    summary = {
        "name": spec.name, "description": spec.description, "sweep": plan.source, "mode": spec.search.mode,
        "evaluation": plan.evaluation, "configurations": int(len(df)), "ok": int(len(ok)),
        "infeasible": int((df["status"] == "infeasible").sum()), "errors": int((df["status"] == "error").sum()),
        "knobs": knobs, "axes": [{"label": ax.label, "fields": ax.fields} for ax in spec.axes],
        "best": best_per_objective(df, spec, knobs),
        "pareto": par["config_id"].tolist(),
        "pareto_goodput_ttft": df.loc[df["pareto_goodput_ttft"], "config_id"].tolist(),
        "infeasible_reasons": dict(sorted(reasons.items(), key=lambda kv: -kv[1])),
        "error_reasons": {r["config_id"]: r["reason"] for _i, r in df[df["status"] == "error"].iterrows()},
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=_py))
    sweep_report(df, par, knobs, str(out / "report.html"), title=spec.name, summary=summary)
    return summary
