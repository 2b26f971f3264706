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

PROVENANCE = ("source", "hardware", "software", "date")

SCHEMAS: dict[str, tuple[str, ...]] = {
    "gemm": ("hardware", "dtype", "m", "n", "k", "us"),
    "attention": ("hardware", "phase", "batch", "new_tokens", "context", "heads", "kv_heads", "head_dim", "us"),
    "mla": ("hardware", "phase", "batch", "new_tokens", "context", "heads", "kv_lora", "rope_dim", "nope_dim", "v_dim", "us"),
    "moe": ("hardware", "dtype", "tokens", "hidden", "inter", "experts", "top_k", "tp", "ep", "distribution", "us"),
    "deepep_low_latency": ("hardware", "ep_size", "gpus_per_node", "tokens_per_rank", "hidden", "top_k", "experts",
                           "dispatch_us", "combine_us"),
    "deepep_normal": ("hardware", "ep_size", "gpus_per_node", "tokens_per_rank", "hidden", "top_k", "experts", "sms",
                      "leg", "dispatch_gbps", "combine_gbps", "dispatch_us", "combine_us"),
    "nccl_collectives": ("hardware", "op", "gpus", "nodes", "dtype", "message_bytes", "us", "busbw_gbps"),
    "mooncake_transfer": ("hardware", "nics", "nic_gbit", "bytes", "ms", "mode", "regime"),
    "forward": ("hardware", "model", "phase", "batch", "tokens", "context", "layers", "us"),
    "kv_transfer_chunks": ("hardware", "backend", "link", "chunks", "chunk_bytes", "bytes", "nics", "nic_gbit", "ms"),
    "step": ("hardware", "model", "phase", "tp", "dp", "ep", "batch", "tokens", "context", "tbo", "mtp_draft",
             "ms"),
}
# measurement columns a file may have beyond its schema, with the value a missing cell means
EXTRA: dict[str, dict[str, object]] = {
    "gemm": {"groups": 1},  # grouped GEMM: ``groups`` weight matrices, M rows each
    "step": {"redundant_experts": 0, "kv_dtype": "bf16", "accept_len": float("nan")},
    "mooncake_transfer": {"chunks": float("nan")},  # work requests per sender (fit_comm.fit_mooncake)
}
OPTIONAL = ("fit", "note")


def data_dir() -> Path:
    return calibration_dir() / "data"


def columns(name: str) -> list[str]:
    """Column order of ``<name>.csv``: measurement columns, fit/note, provenance."""
    return list(SCHEMAS[name]) + list(EXTRA.get(name, {})) + list(OPTIONAL) + ["source", "software", "date"]


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
