"""Calibration data files (calibration/data/*.csv): schemas, loading, provenance checks.

One CSV per kind of measurement. ``SCHEMAS`` names each file's columns in order (the
measurement columns, then the provenance columns every row must fill). An optional ``fit``
column (``yes``/``no``, blank = yes) keeps a row in the file and the report but out of the
fit; its ``note`` says why. Rows of a microbenchmark ``--dry-run`` (CPU) are never fitted. calibration/data/README.md documents the units.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..specs.catalog import calibration_dir
from ..specs.errors import SpecError

from .schemas import EXTRA, OPTIONAL, PROVENANCE, SCHEMAS, columns  # noqa: F401  (re-exported)


# GEMMs shorter than this, timed as back-to-back launches (not CUDA-graph replays), time the host's
# issue rate, not the kernel: on the first H100 host one launch cost 10.7 us of host time (launch.csv,
# launch_host) and a torch.matmul / torch._scaled_mm call ~18-23 us (the floor of those rows at small M)
HOST_BOUND_US = 50.0


def session_of(note) -> str:
    """The session (one run of calibration/microbench/gpu_session.py) a row came from: its note's
    ``command: ...`` (each run wrote to its own --out), without what ingestion appended after it
    ("; proxy relabelled ..."); "" for a row that names no command."""
    note = str(note) if note is not None else ""
    return note[note.rfind("command: "):].split(";")[0] if "command: " in note else ""


def plain(v):
    """A cell as the file has it (a numpy scalar's repr names its type: np.float64(-5.0))."""
    return v.item() if hasattr(v, "item") else v


def data_dir() -> Path:
    return calibration_dir() / "data"


def load(name: str, required: tuple[str, ...] = ()) -> pd.DataFrame:
    """Read ``calibration/data/<name>.csv``; every row must carry provenance.

    Adds a boolean ``use`` column: False where the row's ``fit`` column says ``no``."""
    path = data_dir() / f"{name}.csv"
    if not path.is_file():
        raise SpecError("calibration data file not found", source=str(path))
    df = pd.read_csv(path)
    for col in PROVENANCE + tuple(SCHEMAS.get(name, ())) + required:
        if col not in df:
            raise SpecError(f"missing column {col!r}", source=str(path))
    for col in PROVENANCE:
        bad = df[col].isna() | (df[col].astype(str).str.strip() == "")
        if bad.any():
            raise SpecError(f"line {int(bad.to_numpy().argmax()) + 2}: {col}: every row needs provenance", source=str(path))
    fit = df["fit"].astype(object).fillna("yes").astype(str).str.lower() if "fit" in df else pd.Series("yes", index=df.index)
    for col, default in EXTRA.get(name, {}).items():
        df[col] = df[col].fillna(default) if col in df else default
    df["use"] = (fit != "no") & ~df["source"].astype(str).str.startswith("dry-run")  # CPU harness checks are no data
    df["note"] = df["note"].astype(object).fillna("").astype(str) if "note" in df else ""
    return df


def write(name: str, df: pd.DataFrame, folder: Path | None = None) -> Path:
    """Write rows in the schema's column order (extra columns are dropped)."""
    path = (folder or data_dir()) / f"{name}.csv"
    cols = [c for c in columns(name) if c in df.columns]
    df[cols].to_csv(path, index=False)
    return path
