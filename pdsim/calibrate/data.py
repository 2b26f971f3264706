"""Calibration data files (calibration/data/*.csv) with their provenance columns checked."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..specs.catalog import calibration_dir
from ..specs.errors import SpecError

PROVENANCE = ("source", "hardware", "software", "date")


def data_dir() -> Path:
    return calibration_dir() / "data"


def load(name: str, required: tuple[str, ...] = ()) -> pd.DataFrame:
    """Read ``calibration/data/<name>.csv``; every row must carry provenance."""
    path = data_dir() / f"{name}.csv"
    if not path.is_file():
        raise SpecError("calibration data file not found", source=str(path))
    df = pd.read_csv(path)
    for col in PROVENANCE + required:
        if col not in df:
            raise SpecError(f"missing column {col!r}", source=str(path))
    for col in PROVENANCE:
        bad = df[col].isna()
        if bad.any():
            raise SpecError(f"line {int(bad.idxmax()) + 2}: {col}: every row needs provenance", source=str(path))
    return df
