"""Run a sweep: expand axes, validate them all up front, simulate every configuration (process
pool or Ray), cache each finished one by a hash of its scenario, write tables and a report.

Determinism: a configuration's result depends only on its scenario data (seed included), and
rows are ordered by configuration, so any worker count (or Ray) gives identical rows.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
import yaml

from ..api import load_scenario_data, resolve_scenario
from ..specs._convert import build, read_yaml
from ..specs.errors import SpecError
from ..specs.scenario import apply_overrides, parse_scenario
from .pareto import frontier
from .spec import SweepSpec

METRICS = ["goodput_share", "request_goodput", "request_throughput", "output_throughput",
           "output_throughput_per_gpu", "tokens_per_s_per_user", "mean_ttft_ms", "p50_ttft_ms", "p90_ttft_ms",
           "p99_ttft_ms", "p50_itl_ms", "p90_itl_ms", "p99_itl_ms", "mean_tpot_ms", "p99_tpot_ms",
           "mean_e2e_latency_ms", "completed", "dropped", "gpus", "nodes", "wall_s"]


def load_sweep(path: str | Path) -> tuple[SweepSpec, Path]:
    p = Path(path)
    data = read_yaml(p)
    try:
        return build(SweepSpec, data), p.parent
    except SpecError as err:
        raise err.at(source=str(p)) from None


def config_id(data: dict) -> str:
    """Stable short hash of a configuration's full scenario data."""
    blob = json.dumps(data, sort_keys=True, default=str).encode()
    return hashlib.sha1(blob).hexdigest()[:12]


def _base(spec: SweepSpec, base_dir: Path, source: str) -> tuple[dict, Path]:
    ref = spec.base
    cand = base_dir / ref
    try:
        data, path = load_scenario_data(cand if cand.is_file() else ref)
    except SpecError as err:
        raise SpecError(f"base scenario: {err}", source=source, field="base") from None
    if spec.set:
        data = _apply(data, spec.set, source, "set")
    if spec.slo is not None:
        data["slo"] = {k: v for k, v in asdict(spec.slo).items()}
    return data, path.parent


def _apply(data: dict, point: dict[str, Any], source: str, where: str) -> dict:
    try:
        return apply_overrides(data, point)
    except SpecError as err:
        raise SpecError(f"{err.message}", source=source, field=f"{where} {err.field or ''}".strip()) from None


def expand(spec: SweepSpec, base: dict, source: str) -> list[tuple[dict, dict]]:
    """[(knobs, scenario data)] for every configuration; every axis value is checked against
    the scenario schema first, so a bad axis fails before any simulation."""
    axes_points = []
    for i, ax in enumerate(spec.axes):
        pts = ax.points()
        for pt in pts:
            trial = _apply(base, pt, source, f"axes[{i}]")
            try:
                parse_scenario(trial, source)
            except SpecError as err:
                raise SpecError(f"{err.message}", source=source,
                                field=f"axes[{i}] {err.field or ax.label}") from None
        axes_points.append(pts)
    combos = list(itertools.product(*axes_points)) if axes_points else [()]
    if spec.search.mode == "random" and spec.search.samples < len(combos):
        rng = np.random.default_rng(spec.search.seed)
        pick = sorted(rng.choice(len(combos), size=spec.search.samples, replace=False).tolist())
        combos = [combos[k] for k in pick]
    out = []
    for combo in combos:
        knobs: dict[str, Any] = {}
        for pt in combo:
            knobs.update(pt)
        out.append((knobs, apply_overrides(base, knobs)))
    return out


def _gpus_nodes(resolved) -> tuple[int, float]:
    gpn = resolved.hardware.gpus_per_node
    gpus = sum(g.count * g.gpus_per_instance(gpn) for _r, _i, g in resolved.scenario.cluster.groups())
    return gpus, gpus / gpn


def _simulate_row(data: dict, base_dir: str) -> dict:
    from ..api import simulate

    res = simulate(resolve_scenario(data, "<sweep>", Path(base_dir)))
    s = res.summary()
    row = {k: s.get(k) for k in METRICS}
    tpot = s.get("mean_tpot_ms")
    row["tokens_per_s_per_user"] = 1000.0 / tpot if tpot else None
    return row


def run_config(data: dict, base_dir: str, search: dict, constraints: dict) -> dict:
    """Simulate one configuration (top level so process pools and Ray can ship it)."""
    try:
        resolved = resolve_scenario(data, "<sweep>", Path(base_dir))
    except SpecError as err:
        return {"status": "infeasible", "reason": str(err)}
    gpus, nodes = _gpus_nodes(resolved)
    if constraints.get("max_gpus") is not None and gpus > constraints["max_gpus"]:
        return {"status": "infeasible", "reason": f"{gpus} GPUs > max_gpus {constraints['max_gpus']}", "gpus": gpus}
    if constraints.get("max_nodes") is not None and nodes > constraints["max_nodes"]:
        return {"status": "infeasible", "reason": f"{nodes:g} nodes > max_nodes {constraints['max_nodes']}", "gpus": gpus}
    if search["mode"] != "max_rate":
        row = _simulate_row(data, base_dir)
        row["status"] = "ok"
        return row
    return _max_rate(data, base_dir, search)


def _max_rate(data: dict, base_dir: str, search: dict) -> dict:
    """Bisect the request rate for the highest one meeting ``target_goodput``."""
    lo, hi, field = search["low"], search["high"], search["rate_field"]

    def at(rate: float) -> dict:
        return _simulate_row(apply_overrides(data, {field: rate}), base_dir)

    best = None
    r_lo = at(lo)
    if r_lo["goodput_share"] < search["target_goodput"]:
        return {**r_lo, "status": "ok", "max_rate": 0.0, "reason": f"SLO not met even at {lo} req/s"}
    best, best_rate = r_lo, lo
    r_hi = at(hi)
    if r_hi["goodput_share"] >= search["target_goodput"]:
        return {**r_hi, "status": "ok", "max_rate": hi, "reason": f"SLO still met at the upper bound {hi} req/s"}
    while (hi - lo) / hi > search["tolerance"]:
        mid = (lo * hi) ** 0.5  # geometric: rates span orders of magnitude
        r = at(mid)
        if r["goodput_share"] >= search["target_goodput"]:
            lo, best, best_rate = mid, r, mid
        else:
            hi = mid
    return {**best, "status": "ok", "max_rate": best_rate}


def _cache_path(out: Path, cid: str) -> Path:
    return out / "cache" / f"{cid}.json"


def run_sweep(sweep_path: str | Path, out_dir: str | Path, workers: int | None = None, ray: bool = False,
              ray_address: str | None = None, resume: bool = True, progress: bool = True,
              on_row: Callable[[int, int], None] | None = None) -> pd.DataFrame:
    spec, sdir = load_sweep(sweep_path)
    source = str(sweep_path)
    base, base_dir = _base(spec, sdir, source)
    configs = expand(spec, base, source)
    out = Path(out_dir)
    (out / "cache").mkdir(parents=True, exist_ok=True)
    (out / "configs").mkdir(parents=True, exist_ok=True)
    search = asdict(spec.search)
    constraints = asdict(spec.constraints)
    ids = [config_id(d) for _k, d in configs]
    for cid, (_k, d) in zip(ids, configs):
        with open(out / "configs" / f"{cid}.yaml", "w") as f:
            yaml.safe_dump(d, f, sort_keys=False)
    todo = [i for i, cid in enumerate(ids) if not (resume and _cache_path(out, cid).is_file())]
    results: dict[int, dict] = {}
    for i, cid in enumerate(ids):
        if i not in todo:
            results[i] = json.loads(_cache_path(out, cid).read_text())
    jobs = [(configs[i][1], str(base_dir), search, constraints) for i in todo]

    def done(i: int, row: dict) -> None:
        results[i] = row
        _cache_path(out, ids[i]).write_text(json.dumps(row, default=float))

    if ray or ray_address:
        _run_ray(jobs, todo, done, ray_address, progress)
    else:
        _run_local(jobs, todo, done, workers, progress, on_row)
    rows = []
    for i, (knobs, _d) in enumerate(configs):
        rows.append({"config_id": ids[i], **{k: v for k, v in knobs.items()}, **results[i]})
    df = pd.DataFrame(rows)
    _write_outputs(df, spec, out, [ax for ax in spec.axes])
    df.attrs["computed"] = len(todo)
    return df


def _run_local(jobs, todo, done, workers, progress, on_row) -> None:
    from tqdm import tqdm

    n = len(jobs)
    workers = workers or os.cpu_count() or 1
    bar = tqdm(total=n, unit="config", disable=not progress, dynamic_ncols=True)
    if workers <= 1 or n <= 1:
        for k, job in enumerate(jobs):
            done(todo[k], run_config(*job))
            bar.update()
            if on_row:
                on_row(k + 1, n)
    else:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=workers) as ex:
            for k, row in enumerate(ex.map(run_config, *zip(*jobs), chunksize=1)):
                done(todo[k], row)
                bar.update()
                if on_row:
                    on_row(k + 1, n)
    bar.close()


def _run_ray(jobs, todo, done, address, progress) -> None:
    try:
        import ray
    except ImportError:
        raise SpecError("Ray is not installed: pip install 'pdsim[ray]'", field="--ray") from None
    started = not ray.is_initialized()
    if started:
        ray.init(address=address, include_dashboard=False, log_to_driver=False,
                 **({} if address else {"num_cpus": os.cpu_count() or 1}))
    try:
        remote = ray.remote(run_config)
        refs = [remote.remote(*job) for job in jobs]
        for k, ref in enumerate(refs):
            done(todo[k], ray.get(ref))
    finally:
        if started:
            ray.shutdown()


def _write_outputs(df: pd.DataFrame, spec: SweepSpec, out: Path, axes) -> None:
    from ..report.sweep_figures import sweep_report

    df.to_csv(out / "results.csv", index=False)
    df.astype({c: "string" for c in df.columns if df[c].dtype == object}).to_parquet(out / "results.parquet", index=False)
    ok = df[df["status"] == "ok"] if "status" in df else df
    par = frontier(ok, "output_throughput_per_gpu", "tokens_per_s_per_user") if len(ok) else ok
    par.to_csv(out / "pareto.csv", index=False)
    if len(ok):  # second frontier: most goodput for the least p90 TTFT
        frontier(ok, "request_goodput", "p90_ttft_ms", (True, False)).to_csv(out / "pareto_goodput_ttft.csv", index=False)
    summary: dict[str, Any] = {"configurations": int(len(df)), "feasible": int(len(ok)),
                               "infeasible": int(len(df) - len(ok)), "best": {}}
    for metric, better in [("request_goodput", max), ("goodput_share", max), ("output_throughput_per_gpu", max),
                           ("tokens_per_s_per_user", max), ("max_rate", max), ("p90_ttft_ms", min)]:
        if metric in ok and ok[metric].notna().any():
            idx = ok[metric].idxmax() if better is max else ok[metric].idxmin()
            summary["best"][metric] = {"config_id": ok.loc[idx, "config_id"], "value": float(ok.loc[idx, metric]),
                                       "knobs": {a: _py(ok.loc[idx, a]) for a in _knob_columns(df)}}
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=float))
    sweep_report(df, par, _knob_columns(df), str(out / "report.html"), title=spec.name)


def _py(v):
    return v.item() if hasattr(v, "item") else v


def _knob_columns(df: pd.DataFrame) -> list[str]:
    skip = set(METRICS) | {"config_id", "status", "reason", "max_rate"}
    return [c for c in df.columns if c not in skip]


def compare(paths: list[str], out_dir: str | None = None, overrides: list[str] | None = None) -> pd.DataFrame:
    """The same workload (the first scenario's) through several scenarios, side by side."""
    from ..api import simulate
    from ..report.figures import latency_cdf_figure, ttft_breakdown_figure

    first, _ = load_scenario_data(paths[0], overrides or [])
    results, rows = {}, []
    for p in paths:
        data, path = load_scenario_data(p, overrides or [])
        data["workload"] = first.get("workload", data.get("workload"))
        res = simulate(resolve_scenario(data, str(path), path.parent))
        name = res.scenario.name
        if name in results:
            name = f"{name} ({p})"
        results[name] = res
        s = res.summary()
        rows.append({"scenario": name, **{k: s.get(k) for k in METRICS}})
    df = pd.DataFrame(rows)
    if out_dir:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        df.to_csv(out / "compare.csv", index=False)
        figs = [latency_cdf_figure(results), ttft_breakdown_figure(results)]
        html = "".join(f.to_html(full_html=False, include_plotlyjs=(i == 0)) for i, f in enumerate(figs))
        (out / "compare.html").write_text(f"<html><head><meta charset='utf-8'><title>pdsim compare</title></head>"
                                          f"<body><h1>pdsim compare</h1>{df.to_html(index=False)}{html}</body></html>")
    return df
