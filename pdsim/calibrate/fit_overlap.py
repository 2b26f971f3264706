"""Two-batch overlap's compute-side factors from pdsim's own H100 rows (calibration/data/overlap.csv,
written by calibration/microbench/gpu_overlap.py; issue 23 item 2).

Under SGLang's prefill TBO, DeepEP's normal kernels hold ``held`` SMs (24 of 132) and DeepGEMM is
told to use the rest (``deep_gemm_num_sms = total - DeepEPConfig.num_sms``). The proportional price
of that is ``1 / (1 - share)`` (1.222 on an H100). The rows measure instead, for FP8 GEMMs
(``torch._scaled_mm``, cuBLASLt) on DeepSeek-V3's prefill shapes:

- ``carveout``: the GEMM with 24 SMs carved out, alone on the GPU, over the same GEMM with none;
- ``beside``: the GEMM carved out by 24 while a DeepEP-like proxy runs on 24 SMs on another stream
  (``copy_t64_w32``: one 1024-thread CTA per SM streaming ~0.56 TB/s of HBM, the rate of a DeepEP
  normal kernel's copies, ``COPY_HBM_PASSES`` x its link bytes), over the same GEMM alone with none;
- ``other``: FlashAttention prefill (torch SDPA, which no carve-out limits) beside the same proxy
  over it alone.

Each factor is given as a multiple of the proportional loss, ``k = (ratio - 1) / (share / (1 -
share))`` with share = 24 / SMs, so a GPU with another SM count takes the same k (a stated
assumption: the H200's own rows, in the report, check it). Median over shapes (and runs): one run's GEMM point moves
up to ~10% from run to run.
"""
from __future__ import annotations

import statistics
from pathlib import Path

import numpy as np
import pandas as pd

from .data import HOST_BOUND_US, data_dir, plain, session_of

FILE = "overlap.csv"
PROXY = "proxy_copy_t64_w32"
HELD = 24


def _sm_count(df: pd.DataFrame, hardware: str, path: Path) -> int:
    """The GPU's SM count: its hardware profile's ``gpu.sms``, which the rows' notes (``<SMs> SMs;``,
    gpu_overlap.py) must not contradict: the share the factors are relative to."""
    from ..specs.catalog import hardware_keys, load_hardware_ref
    from ..specs.errors import SpecError

    if hardware not in hardware_keys():
        raise SpecError(f"no hardware profile {hardware!r} to take its SM count from", source=str(path))
    sms = int(load_hardware_ref(hardware).gpu.sms)
    noted = set(df["note"].str.extract(r"^(\d+) SMs;")[0].dropna().astype(int))
    if sms <= HELD or noted - {sms}:
        raise SpecError(f"{hardware}: SM count {sms} in its profile, {sorted(noted)} in the rows' notes; expected "
                        f"one count > {HELD} (the SMs held)", source=str(path))
    return sms


COLUMNS = ("hardware", "kernel", "shape", "held_sms", "beside", "us", "source", "note")


def _read(path: Path) -> pd.DataFrame:
    """overlap.csv's rows, or a SpecError naming the file, line and field of the first row the
    fit cannot use (an empty file, a missing column, a time that is not a finite number > 0 us, an
    SM count that is not a whole number >= 0): bad data, not a traceback or a row silently left out."""
    from ..specs.errors import SpecError

    try:
        df = pd.read_csv(path)
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as e:
        raise SpecError(f"not a CSV with a header row ({str(e).splitlines()[0]})", source=str(path)) from None
    for col in COLUMNS:
        if col not in df:
            raise SpecError(f"missing column {col!r} (expected {', '.join(COLUMNS)})", source=str(path))
    us = pd.to_numeric(df["us"], errors="coerce")
    held = pd.to_numeric(df["held_sms"], errors="coerce")
    checks = (("us", ~(us.notna() & np.isfinite(us) & (us > 0)), "a finite time > 0 us"),
              ("held_sms", ~(held.notna() & (held >= 0) & (held == held.round())), "a whole number of SMs >= 0"))
    for col, bad, what in checks:
        if bad.any():
            i = int(bad.to_numpy().argmax())
            raise SpecError(f"line {i + 2}: {col}: expected {what}, got {plain(df[col].iloc[i])!r}", source=str(path))
    df["us"] = us.astype(float)
    df["held_sms"] = held.astype(int)
    df["note"] = df["note"].astype(object).fillna("").astype(str)
    return df


def overlap_factors(path: str | Path | None = None, hardware: str = "h100") -> dict:
    """{'carveout', 'beside', 'other'}: each a dict of ``ratio`` (median), ``k`` (as a multiple of
    the proportional loss), ``n`` (points), ``lo``/``hi`` (range of the ratios); empty without rows."""
    path = Path(path) if path is not None else data_dir() / FILE
    if not path.is_file():
        return {}
    return _factors(_read(path), hardware, path)


def _factors(df: pd.DataFrame, hardware: str, path: Path) -> dict:
    """``overlap_factors`` of the rows ``df`` read from ``path``."""
    df = df[(df["hardware"] == hardware) & (df["source"] == "measured")].copy()
    if df.empty:
        return {}
    df["run"] = df["note"].map(session_of)
    sms = _sm_count(df, hardware, path)
    prop = (HELD / sms) / (1.0 - HELD / sms)
    g = df[df["kernel"] == "gemm_fp8"]
    alone = g[g["beside"] == "none"].groupby(["run", "shape", "held_sms"])["us"].median()
    out = {}

    def put(name, ratios):
        if ratios:
            r = statistics.median(ratios)
            out[name] = {"ratio": r, "k": (r - 1.0) / prop, "n": len(ratios), "lo": min(ratios), "hi": max(ratios)}
    alone = alone[alone >= HOST_BOUND_US]  # the host's issue rate, not the kernel
    put("carveout", [alone[(run, sh, HELD)] / alone[(run, sh, 0)] for run, sh, held in alone.index
                     if held == HELD and (run, sh, 0) in alone.index])
    bes = g[(g["beside"] == PROXY) & (g["held_sms"] == HELD)]
    put("beside", [r.us / alone[(r.run, r.shape, 0)] for r in bes.itertuples() if (r.run, r.shape, 0) in alone.index])
    a = df[(df["kernel"] == "sdpa_prefill")]
    a_alone = a[a["beside"] == "none"].groupby(["run", "shape"])["us"].median()
    put("other", [r.us / a_alone[(r.run, r.shape)] for r in a[a["beside"] == PROXY].itertuples()
                  if (r.run, r.shape) in a_alone.index])
    return out


def overlap_report(path: str | Path | None = None, check: tuple[str, ...] = ("h200",)) -> str:
    """Text: the measured factors beside the constants ``costs/sm_partition.py`` prices with (fitted
    on the h100 rows), and each GPU of ``check`` with rows of its own against them (every other GPU
    takes H100's k at its own SM share)."""
    from ..costs import sm_partition

    path = Path(path) if path is not None else data_dir() / FILE
    rows = _read(path) if path.is_file() else None
    f = _factors(rows, "h100", path) if rows is not None else {}
    if not f:
        return f"== two-batch overlap: no {FILE} measured (calibration/microbench/gpu_session.py --only overlap)"
    lines = [f"== two-batch overlap ({FILE}, h100): the SM partition's cost as a multiple k of the proportional "
             f"loss share / (1 - share), share = {HELD} SMs"]
    priced = {"carveout": ("GEMM_CARVEOUT_K", "FP8 GEMM with 24 SMs carved out, alone"),
              "beside": ("GEMM_BESIDE_K", f"the same GEMM beside {PROXY.removeprefix('proxy_')}, vs all SMs alone"),
              "other": ("OTHER_BESIDE_K", "SDPA prefill beside the same proxy")}
    for key, (const, what) in priced.items():
        if key in f:
            m = f[key]
            lines.append(f"  {what:<58} {m['ratio']:.3f}x (median of {m['n']}, {m['lo']:.2f}-{m['hi']:.2f})  "
                         f"k {m['k']:.2f}; priced {const} = {getattr(sm_partition, const):.2f}")
    for hw in check:
        other = _factors(rows, hw, path)
        if other:
            lines.append(f"  {hw}'s own rows (it prices with H100's k): " + "; ".join(
                f"{key} {m['ratio']:.3f}x, k {m['k']:.2f} (n {m['n']})" for key, m in other.items()))
    return "\n".join(lines)
