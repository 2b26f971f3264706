"""Whole forward steps measured on a GPU (calibration/data/forward.csv, written by
calibration/microbench/gpu_session.py or forward.py) against pdsim's own step price.

Each row is one forward of a dense model with random weights on one GPU: a prefill of ``tokens``
new tokens (batch 1, no cached prefix) or a decode step of ``batch`` sequences over ``context``
cached tokens each. It is priced by the same step models the simulator uses, roofline prior and
calibrated side by side, for that hardware profile and model at TP1, with CUDA graphs off (the
measured forward runs eager: transformers or the repo's torch decoder) and without the per-step
scheduler overhead (a bare forward has no scheduler). No fit reads this file: every row is held
out, as the step.csv rows are.
"""
from __future__ import annotations

import dataclasses

import pandas as pd

from ..costs.registry import build_step_cost
from ..specs.catalog import hardware_keys, load_hardware_ref, load_model_ref
from ..specs.scenario import EngineSpec, GroupSpec
from . import data

FORWARD_COLUMNS = ["hardware", "model", "phase", "config", "measured_ms", "roofline_ms", "calibrated_ms",
                   "roofline_error", "error", "source", "note"]


def predict_forward_ms(r, kind: str) -> float:
    """Predicted ms of the forward a forward.csv row describes (``kind``: roofline | calibrated)."""
    hw = load_hardware_ref(str(r.hardware))
    model = load_model_ref(str(r.model))
    if int(r.layers) != model.num_layers:  # forward.py --layers N times the first N layers
        model = dataclasses.replace(model, num_layers=int(r.layers))
    group = GroupSpec(gpus=1, engine=EngineSpec(cuda_graph_max_bs=0))
    cost = build_step_cost(kind, hw, model, group, str(r.phase), with_overhead=False)
    if r.phase == "decode":
        b = int(r.batch)
        return cost.step_time(0, 0.0, 0, b, b * float(r.context)) * 1e3
    n = int(r.tokens)
    return cost.step_time(n, n * n / 2.0, 1, 0, 0.0) * 1e3


def forward_comparison(df: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per forward.csv row on a known hardware profile: measured vs roofline vs calibrated ms."""
    if df is None:
        path = data.data_dir() / "forward.csv"
        df = data.load("forward") if path.is_file() else pd.DataFrame(columns=data.columns("forward"))
    keys = set(hardware_keys())
    out = []
    for r in df.itertuples():
        if str(r.hardware) not in keys:
            continue
        roof, cal = predict_forward_ms(r, "roofline"), predict_forward_ms(r, "calibrated")
        ms = float(r.us) / 1e3
        cfg = (f"decode batch {r.batch} x {r.context} ctx" if r.phase == "decode" else f"prefill {r.tokens} tokens") + \
            f", {r.layers} layers"
        note = str(getattr(r, "note", "") or "")
        engine = "transformers" if "transformers" in note else ("torch" if note else "")
        out.append((str(r.hardware), str(r.model), str(r.phase), cfg, ms, roof, cal, (roof - ms) / ms, (cal - ms) / ms,
                    str(r.source), engine))
    return pd.DataFrame(out, columns=FORWARD_COLUMNS)


def forward_report(df: pd.DataFrame | None = None) -> str:
    """Text: every row measured / roofline / calibrated, then mean |error| per hardware, model and phase."""
    c = forward_comparison(df)
    lines = ["== whole forward steps (calibration/data/forward.csv; TP1, eager, no scheduler overhead; held out)"]
    if c.empty:
        lines.append("  no forward.csv rows on a known hardware profile (measure with calibration/microbench/gpu_session.py)")
        return "\n".join(lines)
    for r in c.itertuples():
        mark = "  (dry run: not a measurement)" if r.source.startswith("dry-run") else ""
        lines.append(f"  {r.hardware:<5} {r.model:<13} {r.config:<36} measured {r.measured_ms:>8.2f} ms  roofline "
                     f"{r.roofline_ms:>8.2f} ({r.roofline_error:+.0%})  calibrated {r.calibrated_ms:>8.2f} ({r.error:+.0%})"
                     f"  {r.note}{mark}")
    lines.append("  mean |error|:")
    for (hwk, model), g in c.groupby(["hardware", "model"]):
        parts = [f"all {len(g)}: roofline {g['roofline_error'].abs().mean():.1%}, calibrated {g['error'].abs().mean():.1%}"]
        for phase, gp in g.groupby("phase"):
            parts.append(f"{phase} {len(gp)}: roofline {gp['roofline_error'].abs().mean():.1%}, "
                         f"calibrated {gp['error'].abs().mean():.1%}")
        lines.append(f"    {hwk:<6} {model:<13} " + "; ".join(parts))
    return "\n".join(lines)
