"""Command functions behind ``pdsim sweep`` and ``pdsim compare`` (pdsim/cli.py parses the
arguments and calls these). Exit status: 0 done; 1 some configurations failed unexpectedly
(``error`` rows; a rerun retries them); 2 bad input (one ``error:`` line naming file and
field or axis); 130 interrupted (finished configurations are cached; rerun to resume)."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import pandas as pd

from ..report.sweep_figures import short_name as _short
from ..specs.errors import SpecError

TABLE = [("layout", "layout"), ("goodput_share", "goodput"), ("request_goodput", "goodput/s"),
         ("output_throughput_per_gpu", "tok/s/GPU"), ("tokens_per_s_per_user", "tok/s/user"),
         ("median_ttft_ms", "p50 TTFT ms"), ("p90_ttft_ms", "p90 TTFT ms"), ("p90_itl_ms", "p90 ITL ms"),
         ("mean_tpot_ms", "TPOT ms")]


def _fmt(v) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return "-"
    if isinstance(v, float):
        return f"{v:,.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)


def _table(df: pd.DataFrame, cols: list[tuple[str, str]]) -> str:
    cols = [(c, h) for c, h in cols if c in df]
    cells = [[h for _c, h in cols]] + [[_fmt(r[c]) for c, _h in cols] for _i, r in df.iterrows()]
    widths = [max(len(row[j]) for row in cells) for j in range(len(cols))]
    lines = ["  ".join(v.rjust(w) if i and j else v.ljust(w) for j, (v, w) in enumerate(zip(row, widths)))
             for i, row in enumerate(cells)]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _axis_columns(df: pd.DataFrame, axes: list[dict]) -> tuple[pd.DataFrame, list[tuple[str, str]], list[str]]:
    """One display column per axis that varies; a linked axis shows its values joined by '/'."""
    df = df.copy()
    cols, legend = [], []
    for ax in axes:
        fields = [f for f in ax["fields"] if f in df]
        if not fields or df[fields].astype(str).drop_duplicates().shape[0] <= 1:
            continue
        if len(fields) == 1:
            cols.append((fields[0], _short(fields[0])))
            continue
        name = ax["label"]
        df[name] = df[fields].apply(lambda r: "/".join(_fmt(v) for v in r), axis=1)
        cols.append((name, name))
        legend.append(f"{name} = " + "/".join(_short(f).split(".")[-1] for f in fields))
    return df, cols, legend


def sweep_command(path: str, out: str, workers: int | None = None, ray: bool = False,
                  ray_address: str | None = None, no_resume: bool = False, trust=None,
                  heatmap: tuple[str, str] | None = None) -> int:
    """``pdsim sweep``: run, then print the counts, the best configurations (among those that
    meet the SLO, per workload group), the frontiers and why configurations were infeasible.
    ``trust``: specs.trust.Trust (--allow-plugin); ``heatmap``: the report's heatmap axes."""
    from .sweep import knob_columns, run_sweep  # noqa: F401

    import json
    import warnings

    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # cache problems are printed below, once each
            df = run_sweep(path, out, workers=workers, ray=ray, ray_address=ray_address, resume=not no_resume,
                           progress=sys.stderr.isatty(), trust=trust, heatmap=heatmap)
    except SpecError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        n = len(list((Path(out) / "cache").glob("*.json")))
        print(f"\ninterrupted: {n} finished configurations are cached in {out}/cache; run the same command "
              "again to continue", file=sys.stderr)
        return 130
    for problem in df.attrs.get("cache_warnings", []):
        print(f"warning: {problem}", file=sys.stderr)
    wall = time.perf_counter() - t0
    summary = json.loads((Path(out) / "summary.json").read_text())
    a = df.attrs
    print(f"pdsim sweep {summary['name']}: {len(df)} configurations ({summary['ok']} simulated, "
          f"{summary['meets_slo']} meet the SLO, {summary['infeasible']} infeasible, {summary['errors']} errors); "
          f"{a.get('computed', 0)} computed now, {a.get('cached', 0)} from cache, {wall:.1f} s")
    print(f"  SLO target: {_target_text(summary.get('target') or {})}")
    df, axis_cols, legend = _axis_columns(df, summary.get("axes", []))
    ok = df[df["meets_slo"]]
    key = "max_rate_per_gpu" if "max_rate_per_gpu" in ok else "request_goodput"
    groups = list(dict.fromkeys(df["workload_group"]))
    for g in groups:
        part = ok[ok["workload_group"] == g]
        simulated = int(((df["workload_group"] == g) & (df["status"] == "ok")).sum())
        where = f" at {g}" if g else ""
        if part.empty:
            print(f"\nno configuration{where} meets the SLO ({simulated} simulated; see results.csv)")
            continue
        top = part.sort_values(key, ascending=False, kind="stable").head(10)
        cols = [("config_id", "config")] + [c for c in axis_cols if not c[0].startswith("workload.")] + TABLE
        if "max_rate" in ok:
            cols += [("max_rate", "max rate"), ("max_rate_per_gpu", "rate/GPU")]
        print(f"\ntop {len(top)} of {len(part)} meeting the SLO{where} (of {simulated} simulated), by {key}:")
        print(_table(top, cols))
    for line in legend:
        print(f"  {line}")
    if summary["best"]:
        print("\nbest per objective (among configurations that meet the SLO):")
        w = max(len(k) for k in summary["best"])
        for label, b in summary["best"].items():
            row = df[df["config_id"] == b["config_id"]].iloc[0]
            kn = ", ".join(f"{h}={_fmt(row[c])}" for c, h in axis_cols if not c.startswith("workload."))
            print(f"  {label:<{w}}  {_fmt(b['value']):>9}  [{b['config_id']}] {b.get('layout') or ''}  {kn}")
    if summary["pareto"]:
        par = df[df["pareto"]]
        print("\nPareto frontier (tok/s/GPU vs tok/s/user, configurations that meet the SLO):")
        for g in groups:
            ids = par.loc[par["workload_group"] == g, "config_id"].tolist()
            if ids:
                print(f"  {g + ': ' if g else ''}{len(ids)} configurations: " + ", ".join(ids[:12])
                      + (", ... (pareto.csv)" if len(ids) > 12 else ""))
    if summary["infeasible_reasons"]:
        print("\ninfeasible (not simulated):")
        for reason, n in list(summary["infeasible_reasons"].items())[:8]:
            print(f"  {n:>4} x {reason}")
        if len(summary["infeasible_reasons"]) > 8:
            print(f"  ... and {len(summary['infeasible_reasons']) - 8} other reasons (results.csv, column reason)")
    if summary["errors"]:
        print(f"\n{summary['errors']} configurations failed (not cached; a rerun retries them):", file=sys.stderr)
        for cid, reason in list(summary["error_reasons"].items())[:8]:
            print(f"  [{cid}] {reason}", file=sys.stderr)
    print(f"\nwrote {out}/: results.csv, results.parquet, pareto.csv, pareto_goodput_ttft.csv, summary.json, "
          "report.html, configs/")
    return 1 if summary["errors"] else 0


def _target_text(t: dict) -> str:
    parts = ([f"goodput share >= {t['target_goodput']:g}"] if t.get("target_goodput") is not None else []) + \
        [f"{k} <= {v:g}" for k, v in (t.get("limits") or {}).items()]
    return ", ".join(parts) if parts else "none (every simulated configuration competes)"


def compare_command(paths: list[str], out: str | None = None, set_overrides: list[str] | None = None,
                    trust=None) -> int:
    """``pdsim compare``: one row per scenario, on the first scenario's workload."""
    from .compare import compare

    try:
        df = compare(paths, out, set_overrides or [], trust=trust)
    except SpecError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    cols = [("scenario", "scenario"), ("gpus", "GPUs"), ("request_throughput", "req/s")] + TABLE
    print(_table(df, cols))
    if out:
        print(f"\nwrote {out}/: compare.csv, compare.parquet, compare.html")
    return 0
