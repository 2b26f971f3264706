"""Writing fitted constants into hardware profiles: the ``calibration:`` YAML block (each model
with its formula as a comment) and a summary table for the terminal."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..specs.catalog import hardware_dir, load_hardware_ref

FORMULAS = {
    "gemm": "t = latency + softmax_sharp(F max(M, m_tile) / (M peak eff), bytes / (HBM hbm_eff))  [costs/compute.py]",
    "moe": "grouped expert GEMMs, GEMM form at M = tokens per touched expert, rows padded to m_tile  [costs/compute.py]",
    "attention_prefill": "t = latency + pair FLOPs / (peak_bf16 eff)  [costs/compute.py]",
    "attention_decode": "t = latency + max(KV bytes / (HBM hbm_eff), FLOPs / (peak_bf16 eff))  [costs/compute.py]",
    "mla_prefill": "t = latency + (pairs + query rows x row_pairs) x MHA pair FLOPs / (peak_bf16 eff)  [costs/compute.py]",
    "mla_decode": "t = latency + max(latent bytes / (HBM hbm_eff), FLOPs / (peak_bf16 eff))  [costs/compute.py]",
    "deepep_ll": "t = base + pair_us x remote pairs (experts / ep x (ep - gpn)) + max(NVLink bytes / nvl_gbps, "
                 "RDMA bytes / rdma_gbps)  [costs/deepep.py]",
    "deepep_normal": "t = base + NVLink bytes / nvl_gbps (1 node) or RDMA bytes / rdma_gbps  [costs/deepep.py]",
    "allreduce": "t = base + 2 (n-1) latency + 2 (n-1)/n bytes / busbw  [costs/comm.py]",
    "kv_residency": "decode KV bytes: a share Phi(ln(W / cache_bytes) / cache_log_width) at dram_gbps, the rest at "
                    "cache_gbps, W = the step's KV + weights (a hard cliff at width 0: a cyclic sweep of an LRU-like "
                    "cache)  [calibrate/kv_residency.py, costs/compute.py dram_share]",
    "mooncake": "t = setup + chunks x per_chunk_us (queued per sending GPU) + bytes / (eff x senders' NIC share x "
                "line rate); per-page path: per_page_us per chunk [costs/transfer.py, docs/mechanisms/kv-transfer.md]",
    "memcopy": "measured copies: t = <kind>_latency_us + traffic bytes / <kind>_gbps; hbm_eff = d2d / datasheet HBM; "
               "host_copy_gbps = slower pinned direction (offload tiers)  [calibrate/fit_system.py, costs/measured.py]",
    "host": "measured launches: kernel_launch_us per kernel (host); eager_exposed_us = (eager - graph decode step) / "
            "layers at the smallest batch; eager_issue_us = eager decode step / layers there (host-bound: the step is "
            "the issue time); eager_us_per_kernel = that / kernels_per_layer, the issue cost per kernel of "
            "costs/host.py, exposed only beyond the step's GPU work (costs/step.py)  "
            "[calibrate/fit_system.py, costs/measured.py]",
}
ORDER = ("eff", "m_tile", "hbm_eff", "latency_us", "sharp", "base_us", "pair_us", "nvl_gbps", "rdma_gbps", "intranode_gbps",
         "internode_gbps", "setup_ms", "per_chunk_us", "per_page_us", "rel_uncertainty", "fit_mape", "heldout_mape",
         "points", "heldout_points", "heldout")


def clean(p: dict) -> dict:
    out = {}
    for k, v in p.items():
        if isinstance(v, (float, int, np.floating, np.integer)) and not isinstance(v, bool):
            v = float(v)
            if not math.isfinite(v):
                continue
            v = round(v, 6) if abs(v) < 1e4 else round(v, 1)
        out[k] = v
    return out


def summary_table(results: dict) -> str:
    lines = [f"{'system':<9} {'model':<24} {'constants':<66} {'fit':>6} {'held-out':>9}  note"]
    for k, models in results.items():
        for m, p in models.items():
            consts = ", ".join(f"{kk}={v:.4g}" for kk, v in p.items() if isinstance(v, float)
                               and not kk.endswith(("mape", "points", "excluded_faster_than_peak", "uncertainty")))
            fit = f"{p['fit_mape']:.1%}" if "fit_mape" in p else "-"
            held = f"{p['heldout_mape']:.1%}" if "heldout_mape" in p else "-"
            note = p.get("derived_from") or p.get("partly_from") or ""
            lines.append(f"{k:<9} {m:<24} {consts:<66} {fit:>6} {held:>9}  {note}")
    return "\n".join(lines)


def family(model: str) -> str:
    for f in FORMULAS:
        if model.startswith(f):
            return f
    return model


def calibration_yaml(calibration: dict) -> str:
    """The ``calibration:`` block: per model a comment with its form, then its constants,
    errors and provenance (block style, constants first)."""
    import yaml

    lines = ["calibration:",
             "  # written by `pdsim calibrate fit` from calibration/data/*.csv (pdsim/calibrate/fit.py); units:",
             "  # *_us microseconds, *_gbps 1e9 B/s, eff / hbm_eff fractions of this profile's own peaks;",
             "  # fit_mape / heldout_mape: mean |relative error| on fitted / held-out rows; rel_uncertainty: the",
             "  # relative uncertainty `pdsim sensitivity` perturbs the model by"]
    for m, p in calibration.items():
        ordered = {k: p[k] for k in ORDER if k in p}
        ordered.update({k: v for k, v in p.items() if k not in ordered})
        lines.append(f"  # {m}: {FORMULAS.get(family(m), '')}")
        body = yaml.safe_dump({m: ordered}, sort_keys=False, width=10**6, default_flow_style=False)
        lines += ["  " + ln for ln in body.rstrip("\n").splitlines()]
    return "\n".join(lines) + "\n"


def write_profile(key: str, calibration: dict, folder: Path | None = None, loader=None) -> Path:
    """Replace the ``calibration:`` block of hardware_profiles/<key>.yaml; every other line
    (comments, sources) stays as it was."""
    path = (folder or hardware_dir()) / f"{key}.yaml"
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    start = next((i for i, ln in enumerate(lines) if ln.startswith("calibration:")), None)
    if start is None:
        head, tail = lines, []
    else:
        end = next((i for i in range(start + 1, len(lines)) if lines[i].strip() and not lines[i].startswith((" ", "#"))),
                   len(lines))
        head, tail = lines[:start], lines[end:]
    body = "".join(head)
    if not body.endswith("\n"):
        body += "\n"
    path.write_text(body + calibration_yaml(calibration) + "".join(tail))
    (loader or load_hardware_ref)(key)  # the written profile must load
    return path
