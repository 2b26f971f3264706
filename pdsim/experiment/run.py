"""``run_experiment``: plan (validate every arm), run what is not cached, write the tables and
the report.

Outputs in DIR:
- ``runs.parquet`` / ``runs.csv``: one row per run in plan order: deployment, workload, load,
  policy, replicate, seed, run_id, status and reason, every run metric (evaluate.py);
- ``summary.parquet`` / ``summary.csv``: per deployment, workload, policy and metric: n, mean,
  std and the ``confidence`` interval across replicates;
- ``paired.parquet`` / ``paired.csv``: each policy minus the baseline, paired by replicate:
  mean difference, interval, relative difference, t, p, Holm-adjusted p, significance;
- ``quantiles.parquet``: every run's latency quantiles (TTFT, TPOT, E2E at 101 levels), and
  ``cdf.csv``: their mean per policy with the interval (what the report's CDFs draw);
- ``configs/<run_id>.yaml``: each run's full scenario (``pdsim run`` loads it);
- ``experiment.json``: counts, the baseline, where every table is, cache warnings;
- ``report.html`` (with ``plotly.min.js`` beside it);
- ``cache/<key>.json``: finished runs, keyed like sweeps (scenario data, the files it reads,
  the simulator code, the evaluation), so a rerun computes only what is missing.
"""
from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from ..explore.runner import Cache
from ..explore.sweep import check_out_dir, check_workers
from ..specs.trust import Trust
from .analysis import mean_quantiles, paired_table, quantile_table, summary_table
from .evaluate import RUN_METRICS, check_metrics  # noqa: F401 - check_metrics re-exported
from .plan import ExperimentPlan, build_plan
from .report import experiment_report
from .runner import run_jobs
from .spec import experiment_path, load_experiment


@dataclass
class ExperimentResult:
    plan: ExperimentPlan
    runs: pd.DataFrame
    summary: pd.DataFrame
    paired: pd.DataFrame
    quantiles: pd.DataFrame
    computed: int
    cached: int
    cache_warnings: list[str]


def plan_experiment(path: str | Path, trust: Trust | None = None) -> ExperimentPlan:
    """Load and validate an experiment file and list its runs; simulates nothing."""
    spec, exp_dir = load_experiment(path)
    return build_plan(spec, exp_dir, str(experiment_path(path)), trust)


def _write_configs(plan: ExperimentPlan, out: Path) -> None:
    d = out / "configs"
    d.mkdir(parents=True, exist_ok=True)
    for run in plan.runs:
        p = d / f"{run.run_id}.yaml"
        text = yaml.safe_dump(run.data, sort_keys=False)
        if not p.is_file() or p.read_text() != text:
            tmp = d / f".{run.run_id}.yaml.tmp"
            tmp.write_text(text)
            os.replace(tmp, p)


def assemble(plan: ExperimentPlan, rows: list[dict]) -> pd.DataFrame:
    recs = []
    for run, row in zip(plan.runs, rows):
        rec: dict[str, Any] = {"deployment": run.deployment, "workload": run.workload, "load": run.load,
                               "policy": run.policy, "replicate": run.replicate, "seed": run.seed,
                               "run_id": run.run_id, "status": row.get("status"), "reason": row.get("reason")}
        rec.update({m: row.get(m) for m in RUN_METRICS})
        rec["drop_reasons"] = json.dumps(row.get("drop_reasons") or {}, sort_keys=True)
        rec["eval_wall_s"] = row.get("eval_wall_s")
        recs.append(rec)
    df = pd.DataFrame.from_records(recs)
    for m in list(RUN_METRICS) + ["eval_wall_s", "load"]:
        df[m] = pd.to_numeric(df[m], errors="coerce")
    return df


def _table(df: pd.DataFrame, out: Path, name: str) -> None:
    df.to_csv(out / f"{name}.csv", index=False)
    mixed = {c: "string" for c in df.columns if df[c].dtype == object}
    df.astype(mixed).to_parquet(out / f"{name}.parquet", index=False)


def run_experiment(path: str | Path, out_dir: str | Path, workers: int | None = None, ray: bool = False,
                   ray_address: str | None = None, resume: bool = True, progress: bool = True,
                   trust: Trust | None = None, standalone_report: bool = False) -> ExperimentResult:
    """Run the experiment in ``path`` and write its outputs to ``out_dir`` (see the module
    docstring). Raises SpecError naming the file and arm before simulating anything when the
    experiment is malformed. ``trust``: which plug-in modules runs may import
    (``--allow-plugin``) and which files they may read; the default allows installed
    plug-ins only."""
    check_workers(workers)
    trust = trust or Trust()
    plan = plan_experiment(path, trust)
    out = check_out_dir(out_dir)
    _write_configs(plan, out)
    cache = Cache(out)
    got: dict[str, dict] = {}
    cached = 0
    for run in plan.runs:
        if run.cache_key in got:
            continue
        hit = cache.get(run.cache_key) if resume else None
        if hit is not None:
            got[run.cache_key] = hit
            cached += 1
    warned = list(cache.problems)
    for problem in warned:
        warnings.warn(problem, stacklevel=2)
    jobs, seen = [], set()
    for run in plan.runs:
        if run.cache_key not in got and run.cache_key not in seen:
            seen.add(run.cache_key)
            jobs.append((run.cache_key, run.data, str(plan.base_dir), trust))
    ids = {run.cache_key: run.run_id for run in plan.runs}

    def done(key: str, row: dict) -> None:
        got[key] = row
        if row.get("status") != "error":  # errors are retried on the next run
            cache.put(key, row, ids[key])

    run_jobs(jobs, done, workers=workers, ray=ray, ray_address=ray_address, progress=progress)
    for problem in cache.problems[len(warned):]:
        warnings.warn(problem, stacklevel=2)
    rows = [got[run.cache_key] for run in plan.runs]
    return write_outputs(plan, rows, out, len(jobs), cached, list(cache.problems), standalone_report)


def write_outputs(plan: ExperimentPlan, rows: list[dict], out: Path, computed: int, cached: int,
                  problems: list[str], standalone: bool = False) -> ExperimentResult:
    spec = plan.spec
    runs = assemble(plan, rows)
    summary = summary_table(runs, spec.metrics, spec.confidence)
    pt = paired_table(runs, spec.metrics, spec.baseline_name, spec.confidence)
    qt = quantile_table(runs, rows)
    mq = mean_quantiles(qt, spec.confidence)
    _table(runs, out, "runs")
    _table(summary, out, "summary")
    _table(pt, out, "paired")
    qt.to_parquet(out / "quantiles.parquet", index=False)
    mq.to_csv(out / "cdf.csv", index=False)
    counts = {"runs": len(runs), "ok": int((runs["status"] == "ok").sum()),
              "infeasible": int((runs["status"] == "infeasible").sum()),
              "errors": int((runs["status"] == "error").sum())}
    meta = {"name": spec.name, "description": spec.description, "experiment": plan.source,
            "baseline": spec.baseline_name, "confidence": spec.confidence, "seeds": list(spec.seeds),
            "policies": [p.name for p in spec.policies], "workloads": [w.name for w in spec.workloads],
            "deployments": [d.name for d in spec.deployments], "metrics": list(spec.metrics), **counts,
            "computed": computed, "cached": cached, "cache_warnings": problems,
            "reasons": {r["run_id"]: r["reason"] for _, r in runs[runs["status"] != "ok"].iterrows()},
            "files": ["runs.parquet", "runs.csv", "summary.parquet", "summary.csv", "paired.parquet", "paired.csv",
                      "quantiles.parquet", "cdf.csv", "report.html", "configs/", "cache/"]}
    (out / "experiment.json").write_text(json.dumps(meta, indent=2, default=str))
    experiment_report(out / "report.html", spec, summary, pt, mq, counts, standalone)
    return ExperimentResult(plan, runs, summary, pt, qt, computed, cached, problems)
