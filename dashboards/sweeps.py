"""Reading a sweep result folder (written by ``pdsim sweep``) for the Explore tab.

The folder holds results.csv (one row per configuration: config_id, knob columns, status,
metrics), pareto.csv, pareto_goodput_ttft.csv, summary.json and configs/<config_id>.yaml. The
path is typed on the (local) server; only an existing directory with a results.csv is opened,
and only configs/<id>.yaml files whose id is a plain token are read from it. Nothing here
serves files to the browser.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from pdsim.specs.errors import SpecError

_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
LAYOUT_COLUMNS = ("layout", "prefill_layout", "decode_layout")


def metric_columns() -> list[str]:
    try:
        from pdsim.explore.spec import METRICS, SEARCH_METRICS
        return list(METRICS) + list(SEARCH_METRICS)
    except ImportError:
        try:
            from pdsim.explore.sweep import METRICS
            return list(METRICS) + ["max_rate"]
        except ImportError:  # pragma: no cover - explore not installed
            return []


def _builders():
    """Helpers of pdsim.report.sweep_figures where that version has them."""
    from pdsim.report import sweep_figures as sf

    return getattr(sf, "default_knobs", None), getattr(sf, "heatmap_axes", None)


@dataclass
class SweepFolder:
    path: Path
    df: pd.DataFrame

    @property
    def ok(self) -> pd.DataFrame:
        return self.df[self.df["status"] == "ok"] if "status" in self.df else self.df

    @property
    def knobs(self) -> list[str]:
        """Knob columns: field paths (they contain a dot) and the layout."""
        default_knobs, _ = _builders()
        if default_knobs is not None:
            return [k for k in default_knobs(self.df) if k in self.df]
        metrics = set(metric_columns())
        return [c for c in self.df.columns if "." in c and c not in metrics]

    @property
    def axes(self) -> list[str]:
        """Columns a heatmap can span: knobs and layout columns that vary among feasible rows."""
        cols = list(dict.fromkeys(self.knobs + [c for c in LAYOUT_COLUMNS if c in self.df]))
        ok = self.ok
        return [c for c in cols if c in ok and ok[c].nunique() > 1]

    def default_axes(self) -> tuple[str | None, str | None]:
        _, heatmap_axes = _builders()
        pair = heatmap_axes(self.df, self.knobs) if heatmap_axes is not None else None
        axes = self.axes
        if not pair:
            pair = (axes[0], axes[1]) if len(axes) >= 2 else (axes[0] if axes else None, None)
        return pair[0], pair[1]

    @property
    def metrics(self) -> list[str]:
        ok = self.ok
        return [m for m in metric_columns() if m in self.df and pd.api.types.is_numeric_dtype(self.df[m])
                and ok[m].notna().any()]

    def default_metric(self) -> str | None:
        for m in ("max_rate_per_gpu", "request_goodput", "goodput_share"):
            if m in self.metrics:
                return m
        return self.metrics[0] if self.metrics else None

    def frontier(self, view: str) -> pd.DataFrame | None:
        """The frontier rows: None lets the figure builder use the table's own marks."""
        mark = "pareto_goodput_ttft" if view == "goodput_ttft" else "pareto"
        if mark in self.df:
            return None
        p = self.path / ("pareto_goodput_ttft.csv" if view == "goodput_ttft" else "pareto.csv")
        if p.is_file():
            try:
                return pd.read_csv(p, dtype={"config_id": str})
            except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError):
                pass
        return self.ok.iloc[0:0]


def open_sweep(folder: str | None) -> SweepFolder:
    """Open a sweep result folder; SpecError (named like the CLI's) when it is not one."""
    text = (folder or "").strip()
    if not text:
        raise SpecError("type the path of a folder written by `pdsim sweep --out DIR`", source="sweep folder")
    p = Path(text).expanduser()
    try:
        p = p.resolve(strict=True)
    except (OSError, RuntimeError):
        raise SpecError("no such folder", source=text) from None
    if not p.is_dir():
        raise SpecError("not a folder", source=text)
    csv = p / "results.csv"
    if not csv.is_file():
        raise SpecError("not a sweep result folder (no results.csv)", source=text)
    try:
        df = pd.read_csv(csv, dtype={"config_id": str})
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
        raise SpecError(f"cannot read results.csv: {err}", source=text) from None
    if "config_id" not in df:
        raise SpecError("results.csv has no config_id column", source=text)
    df["config_id"] = df["config_id"].astype(str)
    return SweepFolder(p, df)


def config_text(folder: str, cid: str) -> str:
    """The scenario YAML of one configuration, read from ``<folder>/configs/<cid>.yaml``."""
    if not _ID.match(str(cid)):
        raise SpecError(f"not a configuration id: {cid!r}", source="sweep folder")
    sweep = open_sweep(folder)
    configs = (sweep.path / "configs").resolve()
    path = (configs / f"{cid}.yaml").resolve()
    if path.parent != configs or not path.is_file():
        raise SpecError(f"no configs/{cid}.yaml in this folder", source=str(sweep.path))
    return path.read_text()
