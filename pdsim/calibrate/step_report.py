"""Whole-step validation: predicted engine steps against published per-step measurements, and the
provenance of every profile constant.

calibration/data/step.csv holds steps measured on real deployments (each row with its source):
a prefill step of ``tokens`` tokens per DP rank of ``context``-token prompts, or a decode step of
``batch`` sequences per DP rank at ``context`` tokens each, on ``tp`` GPUs with attention DP
``dp`` and expert parallelism ``ep`` (plus two-batch overlap, MTP draft steps, redundant experts
and the KV dtype where the deployment used them). No fit reads this file: every row is held out.
A row's step is priced with the same step models the simulator uses (the calibrated model of
its hardware profile, and the first-principles roofline beside it), speculative rows with
SpeculativeStepCost at the row's accept length.

``constants_table`` lists every constant of every profile with its kind (measured, fitted,
derived, assumed), its uncertainty and its source.
"""
from __future__ import annotations

import dataclasses
from functools import lru_cache

import numpy as np
import pandas as pd

from ..costs.registry import build_step_cost
from ..costs.speculative import SpeculativeStepCost, mtp_draft_model
from ..specs.catalog import hardware_keys, load_hardware_ref, load_model_ref
from ..specs.features import ExpertLoadSpec, SpeculativeSpec
from ..specs.hardware import calibration_kind
from ..specs.scenario import EngineSpec, GroupSpec
from . import data

STEP_COLUMNS = ["hardware", "model", "phase", "config", "measured_ms", "calibrated_ms", "roofline_ms", "error",
                "roofline_error", "source"]


def _group(r) -> GroupSpec:
    hw = load_hardware_ref(r.hardware)
    gpn = hw.gpus_per_node
    size = dict(nodes=int(r.tp) // gpn) if int(r.tp) >= gpn else dict(gpus=int(r.tp))
    decode = r.phase == "decode"
    eng = EngineSpec(enable_two_batch_overlap=str(r.tbo).lower() == "yes", ep_num_redundant_experts=int(r.redundant_experts),
                     deepep_mode="low_latency" if decode else "normal", kv_cache_dtype=str(r.kv_dtype),
                     moe_runner=str(getattr(r, "moe_runner", "deepgemm") or "deepgemm"),
                     cuda_graph_max_bs=max(int(r.batch), 1) if decode else 0)
    return GroupSpec(**size, dp=int(r.dp), ep=int(r.ep), enable_dp_attention=int(r.dp) > 1, engine=eng)


def _spec(r) -> SpeculativeSpec | None:
    steps = int(r.mtp_draft)
    if steps <= 0:
        return None
    acc = float(r.accept_len)
    # one rate for every position, reproducing the row's measured accept length: the verify and
    # draft costs do not depend on the rates, only the tokens advanced per step do
    return SpeculativeSpec(num_steps=steps, num_draft_tokens=steps + 1, accept_rates=tuple(_flat_rates(acc, steps)))


def _flat_rates(accept_len: float, steps: int) -> list[float]:
    """Equal per-position rates a with 1 + a + ... + a^steps = accept_len (bisection)."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        a = (lo + hi) / 2
        if sum(a ** j for j in range(steps + 1)) < accept_len:
            lo = a
        else:
            hi = a
    return [lo] * steps


def predict_ms(r, kind: str) -> float:
    """Predicted seconds of the step a step.csv row describes, in ms."""
    hw = load_hardware_ref(r.hardware)
    model = load_model_ref(r.model)
    g = _group(r)
    D = int(r.dp)
    spec = _spec(r)
    if spec is not None and model.mtp_layers < spec.draft_layers:
        model = dataclasses.replace(model, mtp_layers=spec.draft_layers)
    # the row's routing: the deployment's own expert distribution (the default popularity) or
    # uniform random routing (LMSYS's "simulated perfect EPLB", DeepSeek's balanced profile)
    eplb = {"yes": True, "no": False}.get(str(getattr(r, "eplb", "")).lower())
    load = ExpertLoadSpec(skew=0.0 if str(getattr(r, "routing", "default")) == "uniform" else None, eplb=eplb)
    cost = build_step_cost(kind, hw, model, g, r.phase, expert_load=load)
    if spec is not None:
        draft = build_step_cost(kind, hw, mtp_draft_model(model, spec), g, r.phase, with_overhead=False, expert_load=load)
        cost = SpeculativeStepCost(cost, draft, spec)
    if r.phase == "decode":
        b = int(r.batch) * D
        return cost.step_time(0, 0.0, 0, b, b * float(r.context)) * 1e3
    tokens = int(r.tokens) * D
    n = float(r.context)
    seqs = tokens / n
    return cost.step_time(tokens, seqs * n * n / 2.0, int(round(seqs)), 0, 0.0) * 1e3


def step_comparison() -> pd.DataFrame:
    """One row per step.csv row: measured vs predicted (calibrated and roofline) ms."""
    df = data.load("step")
    out = []
    for r in df.itertuples():
        cal = predict_ms(r, "calibrated")
        roof = predict_ms(r, "roofline")
        cfg = (f"{r.phase} TP{r.tp} DP{r.dp} EP{r.ep} " + (f"{r.batch} seq/rank x {r.context} ctx" if r.phase == "decode"
               else f"{r.tokens} tok/rank of {r.context}-token prompts") + (" TBO" if str(r.tbo) == "yes" else "")
               + (f" MTP{r.mtp_draft}" if int(r.mtp_draft) else ""))
        out.append((r.hardware, r.model, r.phase, cfg, float(r.ms), cal, roof, (cal - r.ms) / r.ms, (roof - r.ms) / r.ms,
                    str(r.source)))
    return pd.DataFrame(out, columns=STEP_COLUMNS)


def step_report() -> str:
    """Text: per-row errors and a per-GPU summary (mean |error| of the calibrated model)."""
    df = step_comparison()
    lines = ["== whole steps (calibration/data/step.csv; held out: no fit reads them)"]
    for r in df.itertuples():
        lines.append(f"  {r.hardware:<5} {r.model:<12} {r.config:<58} measured {r.measured_ms:>8.1f} ms  calibrated "
                     f"{r.calibrated_ms:>8.1f} ({r.error:+.0%})  roofline {r.roofline_ms:>8.1f} ({r.roofline_error:+.0%})")
    lines.append("  per GPU, mean |error|:")
    for hwk, g in df.groupby("hardware"):
        lines.append(f"    {hwk:<6} calibrated {g['error'].abs().mean():.1%}  roofline {g['roofline_error'].abs().mean():.1%}"
                     f"  over {len(g)} step(s)")
    return "\n".join(lines)


@lru_cache(maxsize=1)
def constants_table() -> pd.DataFrame:
    """Every constant of every profile: profile, constant, value, kind, relative uncertainty,
    source (efficiency priors from ``sources``; fitted models from ``calibration``)."""
    rows = []
    for key in hardware_keys():
        hw = load_hardware_ref(key)
        for path in ("gpu.pcie_gbps",):  # a figure the transports price with, not a datasheet peak
            rows.append((key, path, float(hw.gpu.pcie_gbps), hw.constant_kind(path), hw.uncertainty.get(path, np.nan),
                         hw.sources.get(path, "")))
        for f in dataclasses.fields(hw.efficiency):
            path = f"efficiency.{f.name}"
            rows.append((key, path, float(getattr(hw.efficiency, f.name)), hw.constant_kind(path),
                         hw.uncertainty.get(path, np.nan), hw.sources.get(path, "")))
        for model, p in hw.calibration.items():
            consts = ", ".join(f"{k}={float(v):.4g}" for k, v in p.items()
                               if isinstance(v, (int, float)) and not k.endswith(("mape", "points", "uncertainty",
                                                                                    "faster_than_peak")))
            src = str(p.get("derived_from") or p.get("partly_from") or p.get("data", ""))
            rows.append((key, f"calibration.{model}", consts, calibration_kind(p), float(p.get("rel_uncertainty", np.nan)),
                         src))
    return pd.DataFrame(rows, columns=["profile", "constant", "value", "kind", "rel_uncertainty", "source"])


def constants_report() -> str:
    df = constants_table()
    lines = ["== profile constants: kind (measured | fitted | derived | borrowed | assumed), relative uncertainty, source"]
    for key, g in df.groupby("profile", sort=False):
        counts = g["kind"].str.split(" ").str[0].value_counts().to_dict()
        lines.append(f"  {key}: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
        for r in g.itertuples():
            unc = f"+-{r.rel_uncertainty:.0%}" if np.isfinite(r.rel_uncertainty) else "   -"
            val = f"{r.value:g}" if isinstance(r.value, float) else str(r.value)
            lines.append(f"    {r.constant:<34} {r.kind:<24} {unc:>6}  {val[:70]:<70}  {r.source[:90]}")
    return "\n".join(lines)
