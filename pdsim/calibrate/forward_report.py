"""Whole forward steps measured on a GPU (calibration/data/forward.csv, written by
calibration/microbench/gpu_session.py or forward.py) against pdsim's own step price.

Each row is one forward of a dense model with random weights on one GPU: a prefill of ``tokens``
new tokens (batch 1, no cached prefix) or a decode step of ``batch`` sequences over ``context``
cached tokens each. It is priced by the same step models the simulator uses, roofline prior and
calibrated side by side, for that hardware profile and model at TP1, with CUDA graphs off (the
measured forward runs eager: transformers or the repo's torch decoder), or on for a decode row
replayed as a CUDA graph (gpu_graph_forward.py), and without the per-step scheduler overhead (a
bare forward has no scheduler). Where the same shape was also replayed as a graph, an eager row's
host time is shown as measured - graph. No fit reads this file: every row is held out, as the
step.csv rows are.
"""
from __future__ import annotations

import dataclasses
import math

import pandas as pd

from ..costs.registry import build_step_cost
from ..specs.catalog import hardware_keys, load_hardware_ref, load_model_ref
from ..specs.errors import SpecError
from ..specs.scenario import EngineSpec, GroupSpec
from . import data

FORWARD_COLUMNS = ["hardware", "model", "phase", "config", "measured_ms", "roofline_ms", "calibrated_ms",
                   "roofline_error", "error", "source", "engine", "graph_ms", "run", "batch", "tokens", "context",
                   "layers"]


def _graph(r) -> bool:
    """The row timed a CUDA-graph replay (gpu_graph_forward.py), not eager launches."""
    return "CUDA graph replay" in str(getattr(r, "note", "") or "")  # not "no CUDA graphs"


def _engine(r) -> str:
    note = str(getattr(r, "note", "") or "")
    impl = "transformers" if "transformers" in note else "torch"
    return f"{impl} {'graph' if _graph(r) else 'eager'}"


def predict_forward_ms(r, kind: str) -> float:
    """Predicted ms of the forward a forward.csv row describes (``kind``: roofline | calibrated),
    with CUDA graphs on for a graph-replayed decode row (pdsim prices every prefill eager)."""
    hw = load_hardware_ref(str(r.hardware))
    model = load_model_ref(str(r.model))
    if int(r.layers) != model.num_layers:  # forward.py --layers N times the first N layers
        model = dataclasses.replace(model, num_layers=int(r.layers))
    graph_bs = int(r.batch) if (_graph(r) and r.phase == "decode") else 0
    group = GroupSpec(gpus=1, engine=EngineSpec(cuda_graph_max_bs=graph_bs))
    cost = build_step_cost(kind, hw, model, group, str(r.phase), with_overhead=False)
    if r.phase == "decode":
        b = int(r.batch)
        return cost.step_time(0, 0.0, 0, b, b * float(r.context)) * 1e3
    n = int(r.tokens)
    if r.phase == "mixed":  # ``batch`` decodes over ``context`` + one ``tokens``-token chunk (no prefix)
        b = int(r.batch)
        return cost.step_time(n, n * n / 2.0, 1, b, b * float(r.context)) * 1e3
    return cost.step_time(n, n * n / 2.0, 1, 0, 0.0) * 1e3


def _priced(r, i: int) -> tuple[float, float, float]:
    """(roofline ms, calibrated ms, measured ms) of row ``i`` of forward.csv, or a SpecError naming
    its line and what was expected (a row the report cannot price is bad data, not a crash)."""
    where = f"line {i + 2}"
    try:
        if str(r.phase) not in ("prefill", "decode", "mixed"):
            raise SpecError(f"expected prefill, decode or mixed, got {r.phase!r}", field="phase")
        ms = float(r.us) / 1e3
        if not (ms > 0.0 and math.isfinite(ms)):
            raise SpecError(f"expected a finite time > 0 us, got {r.us!r}", field="us")
        # what the phase prices: a decode's batch over its context, a prefill's tokens, a mixed
        # step's both (a fraction was truncated, a batch or chunk of 0 priced as the other phase)
        least = {"decode": {"batch": 1, "context": 0}, "prefill": {"tokens": 1},
                 "mixed": {"batch": 1, "tokens": 1, "context": 0}}[str(r.phase)]
        for col in ("batch", "tokens", "context", "layers"):
            v = float(getattr(r, col))
            if not math.isfinite(v):
                raise ValueError(f"{col} {getattr(r, col)!r}")  # blank: the message below
            lo = least.get(col, 1 if col == "layers" else 0)
            if not (v == int(v) and v >= lo):
                raise SpecError(f"expected a whole number >= {lo} for a {r.phase} row, got {getattr(r, col)!r}", field=col)
        return predict_forward_ms(r, "roofline"), predict_forward_ms(r, "calibrated"), ms
    except SpecError as e:
        field = "model" if e.field and e.field.endswith("model") else e.field  # not the scenario's path
        raise SpecError(e.message, source=f"calibration/data/forward.csv: {where}", field=field) from None
    except (ValueError, TypeError) as e:  # a blank or non-numeric batch / tokens / context / layers
        raise SpecError(f"batch, tokens, context and layers must be whole numbers ({e})",
                        source=f"calibration/data/forward.csv: {where}") from None


def forward_comparison(df: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per forward.csv row on a known hardware profile: measured vs roofline vs calibrated ms."""
    if df is None:
        path = data.data_dir() / "forward.csv"
        df = data.load("forward") if path.is_file() else pd.DataFrame(columns=data.columns("forward"))
    keys = set(hardware_keys())
    shape = ["hardware", "model", "phase", "batch", "tokens", "context", "layers"]
    # the same shape replayed as a CUDA graph (median over sessions): the GPU time of the step, so
    # an eager row's host time is measured - graph
    graphs = {}
    for r in df.itertuples():
        if _graph(r):
            graphs.setdefault(tuple(str(getattr(r, c)) for c in shape), []).append(float(r.us) / 1e3)
    out = []
    for i, r in enumerate(df.itertuples()):
        if str(r.hardware) not in keys:
            continue
        roof, cal, ms = _priced(r, i)
        cfg = {"decode": f"decode batch {r.batch} x {r.context} ctx",
               "mixed": f"mixed {r.batch} x {r.context} ctx + {r.tokens} chunk"}.get(str(r.phase), f"prefill {r.tokens} tokens")
        cfg += f", {r.layers} layers"
        g = sorted(graphs.get(tuple(str(getattr(r, c)) for c in shape), []))
        out.append((str(r.hardware), str(r.model), str(r.phase), cfg, ms, roof, cal, (roof - ms) / ms, (cal - ms) / ms,
                    str(r.source), _engine(r), g[len(g) // 2] if g else float("nan"),
                    data.session_of(getattr(r, "note", "")), int(r.batch), int(r.tokens), int(r.context), int(r.layers)))
    return pd.DataFrame(out, columns=FORWARD_COLUMNS)


def forward_report(df: pd.DataFrame | None = None) -> str:
    """Text: every row measured / roofline / calibrated (and its host time where a graph replay of the
    shape exists), then mean |error| per hardware, model, engine (implementation, eager or graph)
    and phase."""
    c = forward_comparison(df)
    lines = ["== whole forward steps (calibration/data/forward.csv; TP1, eager, no scheduler overhead; held out)"]
    if c.empty:
        lines.append("  no forward.csv rows on a known hardware profile (measure with calibration/microbench/gpu_session.py)")
        return "\n".join(lines)
    for r in c.itertuples():
        mark = "  (dry run: not a measurement)" if r.source.startswith("dry-run") else ""
        host = ""
        if r.engine.endswith("eager") and r.graph_ms == r.graph_ms:  # a graph replay of the same shape exists
            h = r.measured_ms - r.graph_ms
            if r.engine.startswith("torch"):  # the same decoder replayed: the difference is the host's
                host = f"  host ~{h:.1f} ms ({h / r.measured_ms:.0%}: measured - graph {r.graph_ms:.2f})"
            else:  # another implementation: its host time and its own extra kernels together
                host = (f"  beyond the torch graph {r.graph_ms:.2f}: {h:+.1f} ms ({h / r.measured_ms:.0%}; host + "
                        f"{r.engine.split()[0]} kernels)")
        lines.append(f"  {r.hardware:<5} {r.model:<13} {r.engine:<18} {r.config:<38} measured {r.measured_ms:>8.2f} ms  "
                     f"roofline {r.roofline_ms:>8.2f} ({r.roofline_error:+.0%})  calibrated {r.calibrated_ms:>8.2f} "
                     f"({r.error:+.0%}){host}{mark}")
    lines += mixed_increments(c)
    lines.append("  mean |error| (roofline, calibrated):")
    for (hwk, model, engine), g in c.groupby(["hardware", "model", "engine"]):
        parts = [f"all {len(g)}: {g['roofline_error'].abs().mean():.1%}, {g['error'].abs().mean():.1%}"]
        for phase, gp in g.groupby("phase"):
            parts.append(f"{phase} {len(gp)}: {gp['roofline_error'].abs().mean():.1%}, {gp['error'].abs().mean():.1%}")
        lines.append(f"    {hwk:<6} {model:<13} {engine:<18} " + "; ".join(parts))
    return "\n".join(lines)


def mixed_increments(c: pd.DataFrame) -> list[str]:
    """Lines: each mixed step (a prefill chunk batched with decodes, replayed as a CUDA graph) less
    the pure decode of the same batch and context, measured against priced (calibrated): what the
    chunk adds to a decode step; and what batching saves against running the chunk alone (its
    pure prefill), which the step contract prices as one pass over the weights for both. The
    decode and prefill are those of the same session, model and layer count (a session's
    machine and minute: another session's host and GPU differ by more than the increment's
    error)."""
    g = c[c["engine"].str.endswith("graph")]
    mixed = g[g["phase"] == "mixed"]
    if mixed.empty:
        return []
    def med(frame, col):
        return float(frame[col].median()) if len(frame) else float("nan")
    lines = ["  mixed steps (CUDA graph): the chunk's increment over the pure decode, and the chunk alone:"]
    for (hwk, model, run, layers, b, n, ctx), m in mixed.groupby(
            ["hardware", "model", "run", "layers", "batch", "tokens", "context"], sort=False):
        same = g[(g["hardware"] == hwk) & (g["model"] == model) & (g["run"] == run) & (g["layers"] == layers)]
        d = same[(same["phase"] == "decode") & (same["batch"] == b) & (same["context"] == ctx)]
        p = same[(same["phase"] == "prefill") & (same["tokens"] == n) & (same["batch"] == 1)]
        cfg = m["config"].iloc[0]
        if d.empty:
            lines.append(f"    {hwk:<5} {cfg:<44} no pure decode of the same batch and context in its session")
            continue
        mi, pi = med(m, "measured_ms") - med(d, "measured_ms"), med(m, "calibrated_ms") - med(d, "calibrated_ms")
        err = f" ({(pi - mi) / mi:+.0%})" if mi > 0 else ""
        saved = ""
        if len(p):  # batching the chunk saves a pass over the weights: (decode + chunk alone) - mixed
            ms_, ps_ = med(p, "measured_ms") - mi, med(p, "calibrated_ms") - pi
            saved = (f"; chunk alone {med(p, 'measured_ms'):.2f} measured, {med(p, 'calibrated_ms'):.2f} priced; "
                     f"batching saves {ms_:.2f} ms measured, {ps_:.2f} priced")
        lines.append(f"    {hwk:<5} {cfg:<44} +{mi:6.2f} ms measured, +{pi:6.2f} priced{err}{saved}")
    return lines
