"""Fit the free constants of the calibrated cost models and write them into the profiles.

``fit_all`` fits every model (fit_compute.py, fit_comm.py) on every system's own rows of
calibration/data/*.csv, then fills what a system has no data for from a measured one:

- compute kernels (GEMM, MoE, attention, MLA) carry over as fractions of the target's own
  peaks (``derived_from: h100 (same fraction of peak)``): H800 is the H100's die and HBM with
  NVLink cut to 400 GB/s; H20 and A800 are assumptions the profile marks;
- communication bandwidths scale with the hardware ratio (DOMAIN.md s6): NVLink legs and
  intranode all-reduce by the NVLink ratio, RDMA legs and internode all-reduce by the NIC
  bandwidth per GPU; latencies carry over;
- a model measured in part (H800's all-reduce has bus bandwidths but no small messages)
  takes the missing constants from the donor (``partly_from``).

Each written model carries its fit error (``fit_mape``, mean |relative error| on the rows
fitted), its held-out error (``heldout_mape``; see lsq.py for the split) and the data file.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..specs.catalog import hardware_dir, hardware_keys, load_hardware_ref
from . import data
from .fit_comm import fit_allreduce, fit_deepep_ll, fit_deepep_normal, fit_mooncake
from .fit_compute import fit_attention, fit_gemm, fit_mla, fit_moe

COMPUTE = ("gemm_bf16", "gemm_fp8", "gemm_fp8_block", "moe_bf16", "moe_fp8_block", "attention_prefill",
           "attention_decode", "mla_prefill", "mla_decode")
DEEPEP = ("deepep_ll_dispatch", "deepep_ll_combine", "deepep_normal_dispatch", "deepep_normal_combine")
MODELS = COMPUTE + DEEPEP + ("allreduce", "mooncake")
# compute donors: the measured Hopper part whose efficiencies a system borrows (same fraction of peak)
COMPUTE_DONOR = {"h800": "h100", "h20": "h100", "a800": "h100"}
FORMULAS = {
    "gemm": "t = latency + max(F (M + m_half) / (M peak eff), bytes / (HBM hbm_eff))  [costs/compute.py]",
    "moe": "grouped expert GEMMs, GEMM form at M = tokens per touched expert  [costs/compute.py]",
    "attention_prefill": "t = latency + pair FLOPs / (peak_bf16 eff)  [costs/compute.py]",
    "attention_decode": "t = latency + max(KV bytes / (HBM hbm_eff), FLOPs / (peak_bf16 eff))  [costs/compute.py]",
    "mla_prefill": "t = latency + absorbed-MLA pair FLOPs / (peak_bf16 eff)  [costs/compute.py]",
    "mla_decode": "t = latency + max(latent bytes / (HBM hbm_eff), FLOPs / (peak_bf16 eff))  [costs/compute.py]",
    "deepep_ll": "t = base + NVLink bytes / nvl_gbps + RDMA bytes / rdma_gbps  [costs/deepep.py]",
    "deepep_normal": "t = base + NVLink bytes / nvl_gbps (1 node) or RDMA bytes / rdma_gbps  [costs/deepep.py]",
    "allreduce": "t = base + 2 (n-1) latency + 2 (n-1)/n bytes / busbw  [costs/calibrated.py]",
    "mooncake": "t = setup + bytes / (eff x NICs x line rate); per-page path + per_page_us per page per layer "
                "[costs/transfer.py]",
}


def _load() -> dict:
    return {n: data.load(n) for n in ("gemm", "moe", "attention", "mla", "deepep_low_latency", "deepep_normal",
                                      "nccl_collectives", "mooncake_transfer")}


def _measured(key: str, hw, d: dict, ll_base: dict, nm_base: dict) -> dict:
    """Every model fitted on ``key``'s own rows (None where it has none)."""
    out: dict[str, dict] = {}

    def rows(name):
        df = d[name]
        return df[df["hardware"] == key]

    g = rows("gemm")
    for dt in ("bf16", "fp8", "fp8_block"):
        if (p := fit_gemm(g, hw, dt)) is not None:
            out[f"gemm_{dt}"] = p
    m = rows("moe")
    for dt in ("bf16", "fp8_block"):
        if (p := fit_moe(m, hw, dt)) is not None:
            out[f"moe_{dt}"] = p
    out.update(fit_attention(rows("attention"), hw))
    out.update(fit_mla(rows("mla"), hw))
    for op in ("dispatch", "combine"):
        if (p := fit_deepep_ll(rows("deepep_low_latency"), op, ll_base.get(op), "h100")) is not None:
            out[f"deepep_ll_{op}"] = p
        if (p := fit_deepep_normal(rows("deepep_normal"), op, nm_base.get(op), base_label="h100")) is not None:
            out[f"deepep_normal_{op}"] = p
    if (p := fit_allreduce(rows("nccl_collectives"), hw.gpus_per_node)) is not None:
        out["allreduce"] = p
    if (p := fit_mooncake(rows("mooncake_transfer"))) is not None:
        out["mooncake"] = p
    return out


def _ratios(src, dst) -> tuple[float, float]:
    return dst.gpu.nvlink_gbps / src.gpu.nvlink_gbps, dst.nic_bytes_per_gpu / src.nic_bytes_per_gpu


def _scale(model: str, params: dict, src, dst, keys=None) -> dict:
    """``params`` of ``src`` carried to ``dst``: bandwidths scaled, the rest unchanged."""
    nv, nic = _ratios(src, dst)
    out = {}
    for k, v in params.items():
        if keys is not None and k not in keys:
            continue
        if isinstance(v, float) and math.isfinite(v) and k in ("nvl_gbps", "intranode_gbps"):
            v *= nv
        elif isinstance(v, float) and math.isfinite(v) and k in ("rdma_gbps", "internode_gbps"):
            v *= nic
        out[k] = v
    return out


NEEDS = {**{m: ("base_us", "nvl_gbps", "rdma_gbps") for m in DEEPEP},
         "allreduce": ("base_us", "latency_us", "intranode_gbps", "internode_gbps")}


def _has(p: dict | None, keys) -> bool:
    return p is not None and all(isinstance(p.get(k), float) and math.isfinite(p[k]) for k in keys)


def _donor(model: str, key: str, hws: dict, measured: dict, keys=()) -> str | None:
    """The measured system to borrow ``keys`` of ``model`` from (all of it when ``keys`` is empty)."""
    cands = [d for d in measured if d != key and measured[d].get(model) is not None
             and _has(measured[d][model], keys or NEEDS.get(model, ()))]
    if not cands:
        return None
    if model in COMPUTE:
        want = COMPUTE_DONOR.get(key)
        return want if want in cands else sorted(cands)[0]
    if model == "mooncake":  # a software cost and a fraction of line rate: the 8-NIC H800 pod
        return "h800" if "h800" in cands else sorted(cands)[0]
    # communication: the measured system with the closest NVLink (NVLink legs dominate inside a node)
    nvl = hws[key].gpu.nvlink_gbps
    return min(sorted(cands), key=lambda d: abs(math.log(hws[d].gpu.nvlink_gbps / nvl)))


def _fill(model: str, key: str, own: dict | None, hws: dict, measured: dict) -> dict | None:
    """``own`` completed from donors, or the whole model derived from one; None without any."""
    hw = hws[key]
    if own is None:
        donor = _donor(model, key, hws, measured)
        if donor is None:
            return None
        nv, nic = _ratios(hws[donor], hw)
        p = _scale(model, measured[donor][model], hws[donor], hw)
        how = "same fraction of peak" if model in COMPUTE else f"NVLink x{nv:.2f}, NIC/GPU x{nic:.2f}"
        p["derived_from"] = f"{donor} ({how}); errors are {donor}'s"
        return p
    missing = [k for k in NEEDS.get(model, ()) if not _has(own, (k,))]
    p, by_donor = dict(own), {}
    for k in missing:
        donor = _donor(model, key, hws, measured, (k,))
        if donor is not None:
            p.update(_scale(model, measured[donor][model], hws[donor], hw, (k,)))
            by_donor.setdefault(donor, []).append(k)
    notes = []
    for donor, ks in by_donor.items():
        nv, nic = _ratios(hws[donor], hw)
        notes.append(f"{', '.join(ks)} from {donor} (NVLink x{nv:.2f}, NIC/GPU x{nic:.2f})")
    if notes:
        p["partly_from"] = "; ".join(notes)
    return p


def fit_all(systems: list[str] | None = None, write: bool = True, quiet: bool = False) -> dict:
    """Fit every model for ``systems`` (default: every profile); write their ``calibration:``
    blocks into hardware_profiles/<system>.yaml when ``write``. Returns {system: {model: params}}."""
    d = _load()
    keys = list(systems or hardware_keys())
    present = {str(h) for n in d.values() for h in n["hardware"].unique()}
    hws = {k: load_hardware_ref(k) for k in sorted(set(keys) | (present & set(hardware_keys())))}
    # kernel latencies of DeepEP, fitted where token counts vary (H100), hold tables at one count
    ref = "h100" if "h100" in hws else None
    ll_base, nm_base = {}, {}
    if ref:
        for op in ("dispatch", "combine"):
            p = fit_deepep_ll(d["deepep_low_latency"][d["deepep_low_latency"]["hardware"] == ref], op)
            if p:
                ll_base[op] = p["base_us"]
            p = fit_deepep_normal(d["deepep_normal"][d["deepep_normal"]["hardware"] == ref], op)
            if p:
                nm_base[op] = p["base_us"]
    measured = {k: _measured(k, hws[k], d, ll_base, nm_base) for k in hws}
    results: dict[str, dict] = {}
    for k in keys:
        hw = hws[k]
        out: dict[str, dict] = {}
        for model in MODELS:
            own = measured[k].get(model)
            if own is None and model in NEEDS and _donor(model, k, hws, measured) is None:
                # no own rows and no single complete donor: each constant from the closest system having it
                p = _fill(model, k, {}, hws, measured)
                if p and "partly_from" in p:
                    p = {"data": f"calibration/data/{'nccl_collectives' if model == 'allreduce' else model}.csv", **p}
                    p["derived_from"] = p.pop("partly_from")
                else:
                    p = None
            else:
                p = _fill(model, k, own, hws, measured)
            if p:
                out[model] = p
        if hw.gpu.fp8_tflops == 0:  # DeepEP and FP8 kernels need Hopper: none for Ampere
            out = {m: v for m, v in out.items() if not (m.startswith("deepep") or "fp8" in m)}
        results[k] = {m: _clean(p) for m, p in out.items()}
        if write:
            write_profile(k, results[k])
    if not quiet:
        print(summary_table(results))
    return results


def _clean(p: dict) -> dict:
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
    lines = [f"{'system':<6} {'model':<24} {'constants':<58} {'fit':>6} {'held-out':>9}  note"]
    for k, models in results.items():
        for m, p in models.items():
            consts = ", ".join(f"{kk}={v:.4g}" for kk, v in p.items() if isinstance(v, float)
                               and not kk.endswith(("mape", "points", "excluded_faster_than_peak")))
            fit = f"{p['fit_mape']:.1%}" if "fit_mape" in p else "-"
            held = f"{p['heldout_mape']:.1%}" if "heldout_mape" in p else "-"
            note = p.get("derived_from") or p.get("partly_from") or ""
            lines.append(f"{k:<6} {m:<24} {consts:<58} {fit:>6} {held:>9}  {note}")
    return "\n".join(lines)


def _family(model: str) -> str:
    for f in FORMULAS:
        if model.startswith(f):
            return f
    return model


ORDER = ("eff", "m_half", "hbm_eff", "latency_us", "base_us", "nvl_gbps", "rdma_gbps", "intranode_gbps", "internode_gbps",
         "setup_ms", "per_page_us", "fit_mape", "heldout_mape", "points", "heldout_points", "heldout")


def calibration_yaml(calibration: dict) -> str:
    """The ``calibration:`` block: per model a comment with its form, then its constants,
    errors and provenance (block style, constants first)."""
    import yaml

    lines = ["calibration:",
             "  # written by `pdsim calibrate fit` from calibration/data/*.csv (pdsim/calibrate/fit.py); units:",
             "  # *_us microseconds, *_gbps 1e9 B/s, eff / hbm_eff fractions of this profile's own peaks;",
             "  # fit_mape / heldout_mape: mean |relative error| on fitted / held-out rows"]
    for m, p in calibration.items():
        ordered = {k: p[k] for k in ORDER if k in p}
        ordered.update({k: v for k, v in p.items() if k not in ordered})
        lines.append(f"  # {m}: {FORMULAS.get(_family(m), '')}")
        body = yaml.safe_dump({m: ordered}, sort_keys=False, width=10**6, default_flow_style=False)
        lines += ["  " + ln for ln in body.rstrip("\n").splitlines()]
    return "\n".join(lines) + "\n"


def write_profile(key: str, calibration: dict) -> Path:
    """Replace the ``calibration:`` block of hardware_profiles/<key>.yaml; every other line
    (comments, sources) stays as it was."""
    path = hardware_dir() / f"{key}.yaml"
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
    load_hardware_ref(key)  # the written profile must load
    return path
