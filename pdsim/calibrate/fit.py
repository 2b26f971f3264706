"""Fit the free constants of the calibrated cost models and write them into the profiles.

``fit_all`` fits every model (fit_compute.py, fit_comm.py) on every system's own rows of
calibration/data/*.csv, then fills what a system has no data for:

- compute kernels (GEMM, MoE, attention, MLA): a *pooled* fit of the measured GPUs of the same
  architecture (Hopper: H100, H200, H800; Ampere: A100-80GB; Ada borrows Ampere's, then
  Hopper's), each row evaluated at its own GPU's peaks, so the constants are the kernel's
  achievable fractions of peak FLOP/s and HBM bandwidth. Applied to the target's own peaks,
  its GEMMs turn compute-bound at *its* ridge point (an H20's 37 FLOP/B in BF16, not an
  H100's 295) and its small-batch GEMMs stay memory-bound where its specs say so
  (``derived_from: pooled ...``). Nothing is copied from one GPU to another as a token count.
- communication bandwidths scale with the hardware ratio (DOMAIN.md s6): NVLink legs and
  intranode all-reduce by the peer (NVLink or PCIe) bandwidth ratio, RDMA legs and internode
  all-reduce by the NIC bandwidth per GPU; latencies carry over;
- a model measured in part (H800's all-reduce has bus bandwidths but no small messages) takes
  the missing constants from the donor (``partly_from``);
- the Mooncake transfer engine: setup and per-chunk costs are software (carried over), its
  efficiency from the system with the closest NIC bandwidth per GPU.

Each written model carries its fit error (``fit_mape``), its held-out error (``heldout_mape``;
see lsq.py for the split), the data file, and ``rel_uncertainty``: the held-out error for a
model fitted on the system's own rows, at least ``DERIVED_MIN_UNCERTAINTY`` for a derived one
(the spread between GPUs of one architecture is not measured).
"""
from __future__ import annotations

import math

import numpy as np

from ..specs.catalog import hardware_dir, hardware_keys, load_hardware_ref
from . import data
from .fit_comm import fit_allreduce, fit_deepep_ll, fit_deepep_normal, fit_mooncake, mooncake_per_chunk_us
from .fit_compute import fit_attention, fit_gemm, fit_mha_prefill, fit_mla, fit_moe
from .fit_system import fit_host, fit_memcopy
from .profile_io import FORMULAS, calibration_yaml, clean, summary_table  # noqa: F401 (re-exported)
from .profile_io import write_profile as _write_profile

COMPUTE = ("gemm_bf16", "gemm_fp8", "gemm_fp8_block", "moe_bf16", "moe_fp8_block", "attention_prefill",
           "attention_decode", "mla_prefill", "mla_decode")
DEEPEP = ("deepep_ll_dispatch", "deepep_ll_combine", "deepep_normal_dispatch", "deepep_normal_combine")
SYSTEM = ("memcopy", "host")  # measured on the GPU itself (fit_system.py): never derived for another
MODELS = COMPUTE + DEEPEP + ("allreduce", "mooncake") + SYSTEM
ARCH_DONORS = {"hopper": ("hopper",), "ampere": ("ampere",), "ada": ("ampere", "hopper"), "blackwell": ("hopper",),
               "cpu": ()}  # a CPU 'device' borrows no GPU's constants
DERIVED_MIN_UNCERTAINTY = 0.25
FILE_OF = {"gemm": "gemm", "moe": "moe", "attention": "attention", "mla": "mla"}


def _load() -> dict:
    d = {n: data.load(n) for n in ("gemm", "moe", "attention", "mla", "deepep_low_latency", "deepep_normal",
                                   "nccl_collectives", "mooncake_transfer", "kv_transfer_chunks")}
    for n in ("memcopy", "launch"):  # written only where a GPU session ran (gpu_session.py)
        d[n] = data.load(n) if (data.data_dir() / f"{n}.csv").is_file() else None
    return d


def _compute_fit(model: str, d: dict, keys: list[str], hws: dict) -> dict | None:
    """Fit compute ``model`` on the rows of systems ``keys`` (one system: its own fit; several:
    the pooled fit)."""
    def rows(name):
        df = d[name]
        return df[df["hardware"].isin(keys)]
    if model.startswith("gemm_"):
        return fit_gemm(rows("gemm"), hws, model[len("gemm_"):])
    if model.startswith("moe_"):
        return fit_moe(rows("moe"), hws, model[len("moe_"):])
    if model.startswith("attention_"):
        return fit_attention(rows("attention"), hws).get(model)
    if model == "mla_prefill":  # FA3 MHA on the non-absorbed heads (fit_mha_prefill)
        return fit_mha_prefill(rows("attention"), hws)
    if model.startswith("mla_"):
        return fit_mla(rows("mla"), hws).get(model)
    raise KeyError(model)


def _measured(key: str, hws: dict, d: dict, ll_base: dict, nm_base: dict, ll_pair: dict | None = None) -> dict:
    """Every model fitted on ``key``'s own rows (absent where it has none)."""
    out: dict[str, dict] = {}
    for model in COMPUTE:
        p = _compute_fit(model, d, [key], hws)
        if p is not None:
            out[model] = p

    def rows(name):
        df = d[name]
        return df[df["hardware"] == key]
    for op in ("dispatch", "combine"):
        if (p := fit_deepep_ll(rows("deepep_low_latency"), op, ll_base.get(op), "h100",
                               (ll_pair or {}).get(op))) is not None:
            out[f"deepep_ll_{op}"] = p
        if (p := fit_deepep_normal(rows("deepep_normal"), op, nm_base.get(op), base_label="h100")) is not None:
            out[f"deepep_normal_{op}"] = p
    if (p := fit_allreduce(rows("nccl_collectives"), hws[key].gpus_per_node)) is not None:
        out["allreduce"] = p
    pc = mooncake_per_chunk_us(d["mooncake_transfer"], d["kv_transfer_chunks"])
    if (p := fit_mooncake(rows("mooncake_transfer"), rows("kv_transfer_chunks"), pc)) is not None:
        out["mooncake"] = p
    if d["memcopy"] is not None and (p := fit_memcopy(rows("memcopy"), hws[key])) is not None:
        out["memcopy"] = p
    if d["launch"] is not None and (p := fit_host(rows("launch"))) is not None:
        out["host"] = p
    return out


def _arch_donors(model: str, key: str, hws: dict, measured: dict) -> list[str]:
    """Measured systems whose rows a pooled fit of ``model`` for ``key`` uses: those of the
    first architecture in ARCH_DONORS that has any."""
    for arch in ARCH_DONORS.get(hws[key].gpu.arch, ("hopper",)):
        ks = sorted(k for k in measured if k != key and hws[k].gpu.arch == arch and model in measured[k])
        if ks:
            return ks
    return []


def _peer(hw) -> float:
    return hw.gpu.peer_bytes_per_s


def _ratios(src, dst) -> tuple[float, float]:
    return _peer(dst) / _peer(src), dst.nic_bytes_per_gpu / src.nic_bytes_per_gpu


def _scale(params: dict, src, dst, keys=None) -> dict:
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


NEEDS = {**{m: ("base_us", "nvl_gbps", "rdma_gbps") + (("pair_us",) if "_ll_" in m else ()) for m in DEEPEP},
         "allreduce": ("base_us", "latency_us", "intranode_gbps", "internode_gbps"),
         "mooncake": ("setup_ms", "eff", "per_chunk_us", "per_page_us")}


def _has(p: dict | None, keys) -> bool:
    return p is not None and all(isinstance(p.get(k), float) and math.isfinite(p[k]) for k in keys)


def _comm_donor(model: str, key: str, hws: dict, measured: dict, keys=()) -> str | None:
    """The measured system to borrow ``keys`` of a communication model from (all of it when
    ``keys`` is empty): the closest peer bandwidth (NVLink legs dominate inside a node), for
    Mooncake and for NIC-bound constants (RDMA, internode bandwidth) the closest NIC bandwidth per
    GPU."""
    if model == "mooncake" and not keys:  # the whole model: a system with its own single-transfer fit
        keys = ("setup_ms", "eff")
    cands = [d for d in measured if d != key and measured[d].get(model) is not None
             and _has(measured[d][model], keys or NEEDS.get(model, ()))]
    if not cands:
        return None
    nic = hws[key].nic_bytes_per_gpu
    if model == "mooncake":
        return min(sorted(cands), key=lambda d: (abs(math.log(hws[d].nic_bytes_per_gpu / nic)), d != "h800"))
    if keys and set(keys) <= {"rdma_gbps", "internode_gbps"}:  # NIC-bound constants: the closest NIC share
        return min(sorted(cands), key=lambda d: abs(math.log(hws[d].nic_bytes_per_gpu / nic)))
    peer = _peer(hws[key])
    return min(sorted(cands), key=lambda d: abs(math.log(_peer(hws[d]) / peer)))


def _fill_comm(model: str, key: str, own: dict | None, hws: dict, measured: dict) -> dict | None:
    """``own`` completed from donors, or the whole model derived from one; None without any."""
    hw = hws[key]
    if own is None:
        donor = _comm_donor(model, key, hws, measured)
        if donor is None:
            return None
        nv, nic = _ratios(hws[donor], hw)
        p = _scale(measured[donor][model], hws[donor], hw)
        if model == "mooncake":  # no rule turns another system's efficiency into this one's: say so
            for k in NEEDS[model]:
                if not _has(p, (k,)) and (d2 := _comm_donor(model, key, hws, measured, (k,))) is not None:
                    p[k] = measured[d2][model][k]
            p["label"] = "borrowed"
            p["derived_from"] = (f"borrowed from {donor}, the measured system with the closest NIC bandwidth per GPU "
                                 f"(x{nic:.2f}): its setup and fraction of line rate, not measured here; per-chunk and "
                                 f"per-page costs are the transfer engine's software; errors are {donor}'s")
            return p
        how = f"peer bandwidth x{nv:.2f}, NIC/GPU x{nic:.2f}"
        p["derived_from"] = f"{donor} ({how}); errors are {donor}'s"
        if "pair_us" in p:  # a cost per NIC message and polled word, not a bandwidth: carried as is
            p["derived_from"] += "; pair_us borrowed unscaled (per remote pair: one NIC atomic and one polled word)"
        return p
    missing = [k for k in NEEDS.get(model, ()) if not _has(own, (k,))]
    p, by_donor = dict(own), {}
    for k in missing:
        donor = _comm_donor(model, key, hws, measured, (k,))
        if donor is not None:
            p.update(_scale(measured[donor][model], hws[donor], hw, (k,)))
            by_donor.setdefault(donor, []).append(k)
    notes = []
    for donor, ks in by_donor.items():
        nv, nic = _ratios(hws[donor], hw)
        notes.append(f"{', '.join(ks)} from {donor} (peer bandwidth x{nv:.2f}, NIC/GPU x{nic:.2f})")
    if notes:
        p["partly_from"] = "; ".join(notes)
    return p


def _uncertainty(p: dict) -> float:
    err = max(float(p.get("heldout_mape", 0.0) or 0.0), float(p.get("fit_mape", 0.0) or 0.0))
    if "derived_from" in p:
        err = max(err, DERIVED_MIN_UNCERTAINTY)
    elif "partly_from" in p or "pair_from" in p:
        err = max(err, DERIVED_MIN_UNCERTAINTY / 2)
    return err if err > 0 else DERIVED_MIN_UNCERTAINTY


def _deepep_bases(d: dict, ref: str) -> tuple[dict, dict, dict]:
    """Kernel latencies of DeepEP, fitted where token counts vary (``ref``), for tables at one
    token count; and the low-latency kernels' cost per remote pair, fitted where token counts
    vary at several multi-node EP sizes, for tables without (one token count, or one node).
    The pair cost is NIC messages and polled words of the same kernels: a system borrows it from
    ``ref``, which has the same NIC (CX-7 400 Gb/s per GPU on H100 / H200 / H800)."""
    ll_base, nm_base, ll_pair = {}, {}, {}
    for op in ("dispatch", "combine"):
        p = fit_deepep_ll(d["deepep_low_latency"][d["deepep_low_latency"]["hardware"] == ref], op)
        if p:
            ll_base[op] = p["base_us"]
            if "pair_us" in p:
                ll_pair[op] = p["pair_us"]
        p = fit_deepep_normal(d["deepep_normal"][d["deepep_normal"]["hardware"] == ref], op)
        if p:
            nm_base[op] = p["base_us"]
    return ll_base, nm_base, ll_pair


def _derive_internode(p: dict, k: str, hws: dict, measured: dict) -> None:
    """All-reduce bus bandwidth across nodes from this system's own links (issue 23, item 3),
    not copied from another system's figure.

    NCCL's multi-node all-reduce is hierarchical: inside each node a reduce-scatter and an
    all-gather on NVLink, across nodes an all-reduce of 1/gpn of the data per GPU over that
    GPU's NIC share. In bus-bandwidth units (n ranks over ``nodes`` nodes) the NIC leg alone
    allows gpn x NIC/GPU x nic efficiency x nodes/(nodes - 1), 2 gpn x NIC/GPU x eff at two
    nodes; the NVLink legs allow the in-node bus bandwidth times the ratio a system that measured
    both shows (H800 SuperPod: 171 across two nodes / 213 in one, DOMAIN.md s2). The smaller
    bounds:   internode = min(intranode x ratio, 2 gpn NIC/GPU nic_eff)."""
    refs = [d for d in sorted(measured) if d != k and _has(measured[d].get("allreduce"), ("intranode_gbps", "internode_gbps"))]
    intra = p.get("intranode_gbps")
    if not refs or not isinstance(intra, float) or not math.isfinite(intra):
        return
    # the reference: the measured system least limited by its network (the largest two-node /
    # one-node ratio: H800's 8 x 400 Gb/s SuperPod; A100's table was taken over a slower fabric)
    ratios = {d: float(measured[d]["allreduce"]["internode_gbps"]) / float(measured[d]["allreduce"]["intranode_gbps"])
              for d in refs}
    refs.sort(key=lambda d: -ratios[d])
    ratio = ratios[refs[0]]
    hw = hws[k]
    nic = 2.0 * hw.gpus_per_node * hw.nic_bytes_per_gpu * hw.efficiency.nic / 1e9
    p["internode_gbps"] = min(intra * ratio, nic)
    note = (f"internode_gbps derived: min(intranode {intra:.0f} x {ratio:.2f} ({refs[0]}'s two-node / one-node ratio), "
            f"NIC leg 2 x {hw.gpus_per_node} x {hw.nic_bytes_per_gpu / 1e9:.1f} GB/s x nic eff {hw.efficiency.nic:g} = {nic:.0f})")
    for key in ("partly_from", "derived_from"):
        if key in p:
            kept = "; ".join(x for x in str(p[key]).split("; ") if "internode_gbps" not in x or "," in x.split(" from ")[0])
            p[key] = (kept.replace("internode_gbps, ", "").replace(", internode_gbps", "") + "; " + note).lstrip("; ")
            break
    else:
        p["partly_from"] = note


def _per_sm(p: dict, model: str, k: str, hws: dict, donors: list[str], out: dict) -> None:
    """Carry a kernel's large-M efficiency to another GPU of the same SM design by its
    mechanism, not as a fraction of peak (issue 23, item 3).

    A tile of a GEMM does tensor-core work and CUDA-core work: DeepGEMM's FP8 block-scaled GEMM
    promotes and rescales every 128-deep partial sum on the CUDA cores; SGLang's Triton fused MoE
    also gathers its rows, loads block scales and scatters its output per tile. On H100/H200 that
    per-tile CUDA-core work bounds these kernels (FP8 block GEMM 0.58, fused MoE 0.24 of FP8
    peak at large M, against 0.78 for cuBLAS BF16, which has none of it). Per SM the CUDA-core
    side sustains ``eff x peak / sms`` FLOP/s on the donors, whatever the tensor cores could do.
    A GPU whose tensor cores are slower per SM than that (H20: 296 TFLOP/s of FP8 over 78 SMs =
    3.8 per SM, against H100's 0.58 x 1979 / 132 = 8.7 and 0.24 x 1979 / 132 = 3.5) is bound by
    its tensor cores instead, at the fraction they reach where nothing else bounds them (the
    pooled dense BF16 GEMM fit, ``gemm_bf16``):

        eff = min(tensor fraction, donors' eff x donor peak per SM / this GPU's peak per SM)

    and a fused MoE is never faster than this GPU's dense GEMM of its dtype. Needs the SM
    counts (``gpu.sms``) of both; without them the pooled fraction stays."""
    dtype = model.split("_", 1)[1]
    tensor = out.get("gemm_bf16")
    hw = hws[k]
    peak_dtype = "fp8" if dtype.startswith("fp8") else "bf16"
    rates = [hws[d].gpu.peak_flops(peak_dtype) / hws[d].gpu.sms for d in donors if hws[d].gpu.sms]
    if tensor is None or not hw.gpu.sms or not rates or len(rates) != len(donors):
        return
    per_sm = hw.gpu.peak_flops(peak_dtype) / hw.gpu.sms
    donor_rate = float(np.mean(rates))
    cap = float(tensor["eff"])
    if model.startswith("moe_"):
        dense = out.get("gemm_fp8_block" if dtype.startswith("fp8") else "gemm_bf16")
        if dense is not None:
            cap = min(cap, float(dense["eff"]))
    eff = min(cap, float(p["eff"]) * donor_rate / per_sm)
    if abs(eff - float(p["eff"])) > 1e-9:
        p["eff_pooled"] = float(p["eff"])
        p["eff"] = eff
        p["derived_from"] += (f"; large-M eff per SM: min(tensor-bound {cap:.3f}, pooled eff x donor peak per SM "
                              f"{donor_rate / 1e12:.2f} / {k}'s {per_sm / 1e12:.2f} TFLOP/s)")


def _system(k: str, hws: dict, d: dict, measured: dict) -> dict:
    hw = hws[k]
    out: dict[str, dict] = {}
    for model in COMPUTE:
        if model in measured[k]:
            out[model] = measured[k][model]
            continue
        donors = _arch_donors(model, k, hws, measured)
        if donors:
            p = _compute_fit(model, d, donors, hws)
            if p is not None:
                if "m_tile" in p:  # the tile is the target's tensor-core instruction shape
                    p["m_tile"] = float(hw.efficiency.m_tile(model.split("_", 1)[1]))
                p["derived_from"] = (f"pooled fit of {', '.join(donors)} ({hws[donors[0]].gpu.arch}) rows at fractions of each "
                                     f"GPU's own peaks, applied to {k}'s peaks (its ridge point sets where kernels turn "
                                     "compute-bound); errors are the pooled fit's")
                out[model] = p
    for model in ("gemm_fp8", "gemm_fp8_block", "moe_bf16", "moe_fp8_block"):  # dense GEMMs first: MoE is capped by them
        p = out.get(model)
        if p is not None and "derived_from" in p:
            _per_sm(p, model, k, hws, _arch_donors(model, k, hws, measured), out)
    for model in DEEPEP + ("allreduce", "mooncake"):
        own = measured[k].get(model)
        if own is None and model in NEEDS and _comm_donor(model, k, hws, measured) is None:
            # no own rows and no single complete donor: each constant from the closest system having it
            p = _fill_comm(model, k, {}, hws, measured)
            if p and "partly_from" in p:
                p = {"data": f"calibration/data/{'nccl_collectives' if model == 'allreduce' else model}.csv", **p}
                p["derived_from"] = p.pop("partly_from")
            else:
                p = None
        else:
            p = _fill_comm(model, k, own, hws, measured)
        if p:
            out[model] = p
    ar = out.get("allreduce")
    own_ar = measured[k].get("allreduce") or {}
    if ar is not None and not _has(own_ar, ("internode_gbps",)):
        _derive_internode(ar, k, hws, measured)
    for model in SYSTEM:  # the GPU's own copies and launches, or nothing
        if model in measured[k]:
            out[model] = measured[k][model]
    if hw.gpu.fp8_tflops == 0:  # no FP8 tensor cores (Ampere): no FP8 kernels
        out = {m: v for m, v in out.items() if "fp8" not in m}
    if hw.gpu.arch == "cpu":  # no collectives or RDMA engines: only its own measured kernels
        out = {m: v for m, v in out.items() if m in measured[k] and m in COMPUTE + SYSTEM}
    if hw.gpu.arch != "hopper":  # DeepEP runs on Hopper (SM90) NVLink + RDMA only
        out = {m: v for m, v in out.items() if not m.startswith("deepep")}
    for p in out.values():
        p["rel_uncertainty"] = _uncertainty(p)
    return {m: clean(p) for m, p in out.items()}


def fit_all(systems: list[str] | None = None, write: bool = True, quiet: bool = False) -> dict:
    """Fit every model for ``systems`` (default: every profile); write their ``calibration:``
    blocks into hardware_profiles/<system>.yaml when ``write``. Returns {system: {model: params}}."""
    d = _load()
    keys = list(systems or hardware_keys())
    hws = {k: load_hardware_ref(k) for k in hardware_keys()}
    ll_base, nm_base, ll_pair = _deepep_bases(d, "h100") if "h100" in hws else ({}, {}, {})
    measured = {k: _measured(k, hws, d, ll_base, nm_base, ll_pair) for k in hws}
    results: dict[str, dict] = {}
    for k in keys:
        results[k] = _system(k, hws, d, measured)
        if write:
            write_profile(k, results[k])
    if not quiet:
        print(summary_table(results))
    return results


def write_profile(key: str, calibration: dict):
    """Replace the ``calibration:`` block of hardware_profiles/<key>.yaml (profile_io.py)."""
    return _write_profile(key, calibration, hardware_dir(), load_hardware_ref)
