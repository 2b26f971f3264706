"""Sweep result folders (written by ``pdsim sweep --out DIR``) for the Explore tab.

A folder holds results.csv (one row per configuration: config_id, knob columns, status,
metrics), pareto.csv, pareto_goodput_ttft.csv, summary.json and configs/<config_id>.yaml.
The page picks a folder from a list: ``SweepCatalog`` finds the folders with a results.csv
under the data folder and the ``--sweeps`` folders (bounded walk, folders.py) and opens only
those, by an opaque key; no path typed by a client reaches the filesystem. A configuration's
YAML is read only from ``configs/<id>.yaml`` with a plain-token id, through pdsim's bounded
YAML reader, and comes back renamed after the configuration it is. Nothing here serves files
to the browser, and nothing here imports a plug-in (the editor validates in the sandbox).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from pdsim.specs.errors import SpecError
from pdsim.specs.yamlio import MAX_BYTES, excerpt, parse_yaml_text

from .folders import TTLCache, walk

_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
LAYOUT_COLUMNS = ("layout", "prefill_layout", "decode_layout")
MAX_RESULTS_BYTES = 64 * 2**20  # a results.csv of ~10^5 configurations
MAX_FOLDERS = 200


def metric_columns() -> list[str]:
    try:
        from pdsim.explore.spec import METRICS, SEARCH_METRICS
        return list(METRICS) + list(SEARCH_METRICS)
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
    label: str = ""

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
            except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError):
                pass
        return self.ok.iloc[0:0]

    def sweep_name(self) -> str:
        """The sweep's name from summary.json, else the folder's name."""
        try:
            p = self.path / "summary.json"
            if p.is_file() and p.stat().st_size < MAX_BYTES:
                name = json.loads(p.read_text(encoding="utf-8")).get("name")
                if isinstance(name, str) and _ID.match(name.replace(".", "_")):
                    return name
        except (OSError, ValueError, AttributeError):
            pass
        return re.sub(r"[^A-Za-z0-9._-]+", "_", self.path.name)[:60] or "sweep"

    def knob_text(self, cid: str) -> str:
        """``knob=value, ...`` of configuration ``cid`` (from results.csv)."""
        rows = self.df[self.df["config_id"] == cid]
        if rows.empty:
            return ""
        row = rows.iloc[0]
        from .views import short_name

        parts = [f"{short_name(k)}={_fmt(row[k])}" for k in self.knobs if k in row and _fmt(row[k]) != ""]
        layout = _fmt(row["layout"]) if "layout" in row else ""
        return ", ".join(parts) + (f" ({layout})" if layout and "layout" not in self.knobs else "")


def _fmt(v) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return ""
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def open_sweep(path: Path, label: str = "") -> SweepFolder:
    """Open a sweep result folder; SpecError when it is not a readable one."""
    src = label or path.name
    csv = path / "results.csv"
    if not csv.is_file():
        raise SpecError("not a sweep result folder (no results.csv)", source=src)
    if csv.stat().st_size > MAX_RESULTS_BYTES:
        raise SpecError(f"results.csv is over {MAX_RESULTS_BYTES // 2**20} MiB", source=src)
    try:
        df = pd.read_csv(csv, dtype={"config_id": str})
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError) as err:
        raise SpecError(f"cannot read results.csv: {excerpt(str(err), 120)}", source=src) from None
    if "config_id" not in df:
        raise SpecError("results.csv has no config_id column", source=src)
    df["config_id"] = df["config_id"].astype(str)
    return SweepFolder(path, df, label or path.name)


class SweepCatalog:
    """The sweep result folders this server offers: under ``data_dir`` (depth <= 4) and under
    each of ``roots`` (a root may itself be a sweep folder)."""

    def __init__(self, data_dir: Path, roots: tuple[Path, ...] = ()):
        self.bases = [("data folder", data_dir.resolve())] + [(r.name or str(r), r.resolve()) for r in roots]
        self._cache = TTLCache()

    def folders(self) -> list[tuple[str, str, Path]]:
        """(key, label, path) of every sweep folder found, at most MAX_FOLDERS."""
        return list(self._cache.get(("folders",), self._scan))

    def _scan(self) -> list[tuple[str, str, Path]]:
        out: list[tuple[str, str, Path]] = []
        for i, (name, base) in enumerate(self.bases):
            found = [base] if (base / "results.csv").is_file() else []
            if not found:
                found = [p for p, is_dir in walk(base, 4, descend=lambda d: not (d / "results.csv").is_file())
                         if is_dir and (p / "results.csv").is_file()]
            for p in found:
                rel = "." if p == base else str(p.relative_to(base))
                out.append((f"{i}:{rel}", f"{rel} ({name})" if rel != "." else f"{base.name} ({name})", p))
                if len(out) >= MAX_FOLDERS:
                    return out
        return out

    def options(self) -> list[dict]:
        return [{"label": label, "value": key} for key, label, _p in self.folders()]

    def refresh(self) -> None:
        self._cache.clear()

    def open(self, key: object) -> SweepFolder:
        """The folder listed under ``key``; SpecError for anything not in the list."""
        if not isinstance(key, str) or not key:
            raise SpecError("pick a sweep result folder from the list", source="sweep folder")
        for k, label, path in self.folders():
            if k == key:
                return open_sweep(path, label)
        self.refresh()  # a folder written since the last look
        for k, label, path in self.folders():
            if k == key:
                return open_sweep(path, label)
        raise SpecError(f"{excerpt(key, 80)} is not one of the sweep folders found", source="sweep folder")


def config_text(sweep: SweepFolder, cid: object) -> str:
    """The scenario YAML of one configuration (``configs/<cid>.yaml``), renamed after it: its
    name is ``<sweep>-<cid>`` and its description names the sweep and the knob values, so a
    loaded point never passes for the sweep's base scenario."""
    import yaml

    if not isinstance(cid, str) or not _ID.match(cid):
        raise SpecError(f"not a configuration id: {excerpt(cid)}", source=sweep.label)
    configs = (sweep.path / "configs").resolve()
    path = (configs / f"{cid}.yaml").resolve()
    if path.parent != configs or not path.is_file():
        raise SpecError(f"no configs/{cid}.yaml in this folder", source=sweep.label)
    if path.stat().st_size > MAX_BYTES:
        raise SpecError(f"configs/{cid}.yaml is over the {MAX_BYTES // 2**20} MiB limit", source=sweep.label)
    data = parse_yaml_text(path.read_bytes(), f"{sweep.label}: configs/{cid}.yaml")
    if not isinstance(data, dict):
        raise SpecError("expected a scenario (a mapping)", source=f"{sweep.label}: configs/{cid}.yaml")
    name = sweep.sweep_name()
    knobs = sweep.knob_text(cid)
    renamed = {"name": f"{name}-{cid}",
               "description": f"sweep {name}, configuration {cid}" + (f": {knobs}" if knobs else "")}
    renamed.update({k: v for k, v in data.items() if k not in renamed})
    return yaml.safe_dump(renamed, sort_keys=False, default_flow_style=None, width=100)
