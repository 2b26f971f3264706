"""``compare``: the same workload through several scenarios, side by side.

The first scenario's workload, SLO and seed are given to every scenario, so the rows differ
only by deployment (cluster, engine knobs, router, transfer, hardware). ``overrides``
(``--set``) apply to every scenario first. All scenarios are validated before any runs.
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pandas as pd

from ..api import load_scenario_data, resolve_scenario
from ..specs.trust import Trust
from .plan import absolutize, layout_of
from .spec import METRICS

SHARED = ("workload", "slo", "seed")


def compare(paths: list[str], out_dir: str | Path | None = None,
            overrides: list[str] | dict[str, Any] | None = None, trust: Trust | None = None) -> pd.DataFrame:
    """Simulate each scenario on the first one's workload; one row per scenario. With
    ``out_dir``: compare.csv, compare.parquet and compare.html (table and figures).
    ``trust`` (specs/trust.py): the plug-in modules and files the scenarios may use
    (``--allow-plugin``); the default allows installed plug-ins only."""
    from ..api import simulate
    from ..specs.errors import SpecError

    if not paths:
        raise SpecError("give at least one scenario", field="scenarios")
    loaded = []
    for p in paths:
        data, path = load_scenario_data(p, overrides or [])
        loaded.append((absolutize(data, [path.resolve().parent]), path))
    first = loaded[0][0]
    resolved = []
    for data, path in loaded:
        data = copy.deepcopy(data)
        for k in SHARED:
            if k in first:
                data[k] = copy.deepcopy(first[k])
            else:
                data.pop(k, None)
        resolved.append(resolve_scenario(data, str(path), path.parent, trust))
    if out_dir is not None:
        from .outdir import check_out_dir

        check_out_dir(out_dir)  # a bad --out fails before anything is simulated
    results: dict[str, Any] = {}
    rows = []
    for (_data, path), rs in zip(loaded, resolved):
        res = simulate(rs)
        name = rs.name if rs.name not in results else f"{rs.name} ({path})"
        results[name] = res
        s = res.summary()
        row: dict[str, Any] = {"scenario": name, "path": str(path)}
        row.update(layout_of(rs.scenario, rs.hardware.gpus_per_node))
        row.update({k: s.get(k) for k in METRICS})
        tpot = s.get("mean_tpot_ms")
        row["tokens_per_s_per_user"] = 1000.0 / tpot if tpot else None
        row["goodput_per_gpu"] = s["request_goodput"] / s["gpus"] if s.get("gpus") else None
        rows.append(row)
    df = pd.DataFrame(rows)
    if out_dir is not None:
        _write(df, results, Path(out_dir))
    return df


def _write(df: pd.DataFrame, results: dict, out: Path) -> None:
    import html

    from ..report.figures import latency_cdf_figure, ttft_breakdown_figure
    from ..report.sweep_figures import TABLE_CSS, compare_figure, html_table, log_axes_where_runs_differ

    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / "compare.csv", index=False)
    df.astype({c: "string" for c in df.columns if df[c].dtype == object}).to_parquet(out / "compare.parquet",
                                                                                   index=False)
    figs = [compare_figure(df), log_axes_where_runs_differ(latency_cdf_figure(results)), ttft_breakdown_figure(results)]
    parts = "".join(f.to_html(full_html=False, include_plotlyjs=(i == 0)) for i, f in enumerate(figs))
    table = html_table(df, first=("scenario", "layout", "gpus"))
    (out / "compare.html").write_text(
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>pdsim compare</title>"
        f"<style>body{{font-family:sans-serif;margin:20px}} {TABLE_CSS}</style></head><body>"
        f"<h1>pdsim compare</h1><p>{html.escape(', '.join(df['scenario']))} on the same workload (the first "
        "scenario's workload, SLO and seed).</p>"
        f"<div class='scroll'>{table}</div>{parts}</body></html>")
