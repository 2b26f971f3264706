"""Append a GPU session's rows (calibration/microbench/gpu_session.py --out FOLDER) to
calibration/data, provenance intact, then `pdsim calibrate fit` refits.

    python calibration/ingest_session.py FOLDER [--data calibration/data] [--check]

Each FOLDER/<name>.csv of a known schema (pdsim.calibrate.data.SCHEMAS) must have that schema's
columns, only ``source: measured`` rows (never a dry run), hardware keys of hardware_profiles/,
and not be in the data already (same point, value, software and date). Rows keep their own ``fit`` and
``note`` (the session marks skewed MoE rows ``fit: no``); ``KERNEL_RULES`` keeps a row out of a
fit whose kernel it did not run, with the reason in its note. ``--check`` validates only.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from pdsim.calibrate import data
from pdsim.specs.catalog import hardware_keys


def _sdpa_not_fa3(df: pd.DataFrame) -> pd.Series:
    """attention.csv: torch SDPA rows (FlashAttention-2 / cuDNN / memory-efficient backends) are
    not the FlashAttention-3 kernels SGLang runs on Hopper, which the ``attention_prefill`` and
    ``attention_decode`` fits describe (AIConfigurator's SGLang rows)."""
    return df["note"].astype(str).str.contains("torch SDPA")


def _host_bound(df: pd.DataFrame) -> pd.Series:
    """gemm.csv: kernels timed as back-to-back launches (not CUDA-graph replays) shorter than
    ``data.HOST_BOUND_US`` (~2x a launch call's floor on the first H100 host): the host's issue
    rate, not the kernel, sets their time."""
    return ~df["note"].astype(str).str.contains("CUDA graph") & (df["us"].astype(float) < data.HOST_BOUND_US)


def _not_fused_moe(df: pd.DataFrame) -> pd.Series:
    """moe.csv: the session's grouped GEMM (torch._grouped_mm, CUTLASS; or a per-expert matmul
    loop) is not SGLang's fused Triton MoE kernel, which ``moe_bf16`` prices (AIConfigurator's
    rows); on the first H100 it ran up to 2.1x faster than that fit at 32768 assignments."""
    note = df["note"].astype(str)
    return (note.str.contains("_grouped_mm") | note.str.contains("per-expert")) & (df["fit"].astype(str) != "no")


def _nn_layout(df: pd.DataFrame) -> pd.Series:
    """gemm.csv: BF16 rows of ``x @ W`` with W stored (K, N) row-major (cuBLAS "NN"; sessions
    before F.linear, their note says torch.matmul). Serving engines run nn.Linear's (N, K) weights
    (F.linear, "TN"). On the first H100 those rows ran 1.22x AIConfigurator's SGLang rows at
    M >= 1024 (median; 1.06-1.64), while the FP8 rows, in the (N, K) layout _scaled_mm needs,
    matched them (1.02x): the layout, not the GPU, set the gap."""
    return (df["dtype"] == "bf16") & df["note"].astype(str).str.contains("torch.matmul")


# file -> [(rows to keep out of the fit, the reason put before their note)]
KERNEL_RULES = {
    "attention": [(_sdpa_not_fa3, "not fitted: torch SDPA is not the FA3 kernel the attention fits price")],
    "moe": [(_not_fused_moe, "not fitted: a CUTLASS grouped GEMM, not the fused Triton MoE kernel moe_bf16 prices")],
    "gemm": [(_nn_layout, "not fitted: x @ W with (K, N) weights (cuBLAS NN), not the (N, K) layout engines run"),
             (_host_bound, f"not fitted: back-to-back launches under {data.HOST_BOUND_US:g} us time the host's issue "
                           "rate (10.7 us per launch on this host), not the kernel")],
}


# columns that describe the point measured, not its value, though their unit is one: overlap.csv's
# proxy_gbps is the HBM rate of the communication proxy beside the kernel (0 for the spin proxy)
POINT_COLUMNS = {"proxy_gbps"}
# columns naming the point that the fits group by: overlap.csv's SM count carved out (a whole number,
# 0 = none) and what ran beside the kernel ("none" or a proxy): a row without them is no point
WHOLE_COLUMNS = {"overlap": ("held_sms",)}
NAMED_COLUMNS = {"overlap": ("kernel", "shape", "beside")}


def _value_columns(name: str) -> list[str]:
    """The schema's measured values (times in us/ms, bandwidths in GB/s)."""
    return [c for c in data.SCHEMAS[name]
            if (c in ("us", "ms", "gbps") or c.endswith(("_us", "_gbps"))) and c not in POINT_COLUMNS]


def _read(src: Path) -> pd.DataFrame:
    """``src`` as a table, or SystemExit with one line (empty, ragged or not a text CSV)."""
    try:
        df = pd.read_csv(src)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError, TypeError) as e:
        why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise SystemExit(f"error: {src}: not a readable CSV ({why}); expected a header line and one row per "
                         "measurement, as gpu_session.py writes") from None
    if not isinstance(df.index, pd.RangeIndex):  # pandas made the surplus leading fields an index
        raise SystemExit(f"error: {src}: a row has more fields than the header's {len(df.columns)} columns")
    return df


def _check_rows(src: Path, name: str, df: pd.DataFrame) -> None:
    """Provenance filled on every row and each measured value a finite positive number (blank
    where the row does not measure it, but not all of them), as data.load and the fits need."""
    for col in data.PROVENANCE:
        blank = df[col].isna() | (df[col].astype(str).str.strip() == "")
        if blank.any():
            raise SystemExit(f"error: {src}: line {int(blank.to_numpy().argmax()) + 2}: {col}: every row needs "
                             "provenance (source, hardware, software, date)")
    vals = _value_columns(name)
    given = pd.Series(False, index=df.index)
    # launch.csv's layer and kernel counts, where given, are divisors of the host fit (fit_system.fit_host)
    counts = [c for c in ("layers", "kernels") if name == "launch" and c in df]
    for col in NAMED_COLUMNS.get(name, ()):
        blank = df[col].isna() | (df[col].astype(str).str.strip() == "")
        if blank.any():
            raise SystemExit(f"error: {src}: line {int(blank.to_numpy().argmax()) + 2}: {col}: expected a name, got a blank")
    for col in WHOLE_COLUMNS.get(name, ()):
        x = pd.to_numeric(df[col], errors="coerce")
        bad = ~(np.isfinite(x) & (x >= 0) & (x == np.round(x)))
        if bad.any():
            i = int(bad.to_numpy().argmax())
            raise SystemExit(f"error: {src}: line {i + 2}: {col}: expected a whole number >= 0, got {data.plain(df[col].iloc[i])!r}")
    for col in [c for c in POINT_COLUMNS if c in df]:
        x = pd.to_numeric(df[col], errors="coerce")
        bad = ~(np.isfinite(x) & (x >= 0))
        if bad.any():
            i = int(bad.to_numpy().argmax())
            raise SystemExit(f"error: {src}: line {i + 2}: {col}: expected a finite number >= 0, got {data.plain(df[col].iloc[i])!r}")
    for col in vals + counts:
        raw = df[col]
        x = pd.to_numeric(raw, errors="coerce")
        bad = raw.notna() & ~(np.isfinite(x) & (x > 0))
        if bad.any():
            i = int(bad.to_numpy().argmax())
            raise SystemExit(f"error: {src}: line {i + 2}: {col}: expected a finite number > 0, got {raw.iloc[i]!r}")
        if col in vals:
            given |= raw.notna()
    if vals and not given.all():
        i = int((~given).to_numpy().argmax())
        raise SystemExit(f"error: {src}: line {i + 2}: no measured value ({', '.join(vals)} all blank)")


def _check_forward(src: Path, df: pd.DataFrame) -> None:
    """Each forward.csv row one the forward report can price (its phase, model and sizes: a mixed
    row with no decodes or no chunk, say), else SystemExit naming its line: once appended, such a
    row stopped ``pdsim calibrate report --section forward`` for every row."""
    from pdsim.calibrate.forward_report import _priced
    from pdsim.specs.errors import SpecError

    for i, r in enumerate(df.itertuples()):
        try:
            _priced(r, i)
        except SpecError as e:
            raise SystemExit(f"error: {src}: line {i + 2}: {e.field + ': ' if e.field else ''}{e.message}") from None


def ingest(folder: Path, out: Path, check: bool = False) -> list[str]:
    """Lines saying what was (or would be) appended; raises SystemExit with one line on bad input."""
    keys = set(hardware_keys())
    if not out.is_dir():
        raise SystemExit(f"error: --data {out}: not a folder (expected calibration/data or a copy of it)")
    said, writes = [], []
    for name in data.SCHEMAS:
        src = folder / f"{name}.csv"
        if not src.is_file():
            continue
        df = _read(src)
        cols = data.columns(name)
        if list(df.columns) != cols:
            raise SystemExit(f"error: {src}: columns {list(df.columns)}; expected {cols}")
        _check_rows(src, name, df)
        bad = df[df["source"].astype(str) != "measured"]
        if len(bad):
            raise SystemExit(f"error: {src}: line {bad.index[0] + 2}: source {bad['source'].iloc[0]!r}: only measured "
                             "rows go into calibration/data (dry runs never do)")
        unknown = sorted(set(df["hardware"].astype(str)) - keys)
        if unknown:
            raise SystemExit(f"error: {src}: hardware {unknown} is not a key of hardware_profiles/")
        if name == "forward":
            _check_forward(src, df)
        dst = out / f"{name}.csv"
        old = pd.read_csv(dst) if dst.is_file() else pd.DataFrame(columns=cols)
        key = list(data.SCHEMAS[name]) + ["software", "date"]  # the same point, value and provenance
        seen = set(map(tuple, old[key].astype(str).to_numpy())) if all(k in old for k in key) else set()
        if seen & set(map(tuple, df[key].astype(str).to_numpy())):
            raise SystemExit(f"error: {src}: these rows are in {dst} already (same point, value, software and date)")
        df["note"] = df["note"].astype(object).fillna("").astype(str)
        df["fit"] = df["fit"].astype(object)
        for rule, why in KERNEL_RULES.get(name, []):
            m = rule(df) & (df["fit"].astype(str) != "no")  # one reason per row: the first that applies
            df.loc[m, "fit"] = "no"
            df.loc[m, "note"] = why + "; " + df.loc[m, "note"]
        said.append(f"{name}.csv: {len(df)} rows ({int((df['fit'].astype(str) == 'no').sum())} not fitted) -> {dst}")
        merged = pd.concat([old, df], ignore_index=True)
        writes.append((dst, merged[[c for c in (list(old.columns) or cols) if c in merged]]))
    if not said:
        raise SystemExit(f"error: {folder}: no CSV of a known schema ({', '.join(data.SCHEMAS)})")
    if not check:  # every file checked before any is written: a bad file leaves the data as it was
        for dst, merged in writes:
            merged.to_csv(dst, index=False)
    return said


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--data", type=Path, default=data.data_dir())
    ap.add_argument("--check", action="store_true", help="validate only, append nothing")
    a = ap.parse_args()
    try:
        lines = ingest(a.folder, a.data, a.check)
    except SystemExit as e:  # bad input: its one line, exit 2 (the CLI convention)
        if not isinstance(e.code, str):
            raise
        print(e.code, file=sys.stderr)
        return 2
    for line in lines:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
