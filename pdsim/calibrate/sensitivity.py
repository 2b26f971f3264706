"""Which constants move a scenario's answer: perturb each fitted, derived or assumed constant of
its hardware profile by its uncertainty and re-simulate.

The constants and their relative uncertainties u come from the profile itself:
- ``efficiency.<name>`` with an entry in the profile's ``uncertainty`` block (assumptions and
  derivations: step overhead, launch costs, DeepEP SM share, all-reduce latency, ...): the value x
  (1 - u) and x (1 + u), a fraction of peak kept at most 1 (the report says when);
- each fitted or derived model of ``calibration`` with its ``rel_uncertainty`` (the held-out
  error of its fit, at least 25% when derived from other GPUs): the model's times scaled by
  f = 1 / (1 + u) (low end) and f = 1 + u (high end): efficiencies and bandwidths divided by
  f, latencies, setup and per-chunk costs multiplied by f.

- the assumptions that live in the price modules, not in a profile (``ASSUMPTIONS``): P/D fixed
  costs (router, bootstrap, first contact), restart (process, weight load, communicator init,
  graph capture), MTP acceptance (DeepSeek's measured rates, relative, at most 1), the default
  expert popularity and its per-batch drift, CUDA-graph and DeepEP buffer memory, the NVLink
  KV-copy constants, the Mooncake transfer priors (where no fitted ``calibration.mooncake``
  prices the transfer), W4A16 dequantisation, the small-kernel counts (elementwise.py), the attention
  backends' assumed efficiencies (attention_backends.py, where a group names a backend): each
  patched in-process for the two runs and restored after (``assumption_patch``), run only where
  the scenario uses it (``applies``).

A constant is simulated only if it changes a price this scenario uses (a step of one of its
groups at probe shapes, or its KV transfer), so a dense model does not re-run for DeepEP. Each
run is ``pdsim.simulate`` on a ``dataclasses.replace`` of the resolved scenario with the
perturbed profile; the table ranks constants by the largest relative change of the headline
metrics (mean TTFT, mean ITL, output throughput, goodput) and so says which measurement would
tighten the answer most.
"""
from __future__ import annotations

import dataclasses
import importlib
import math
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable

from ..costs.registry import build_step_cost
from ..costs.transfer import flow_cap, transfer_plan
from ..specs.hardware import FRACTIONS, HardwareProfile, calibration_kind

HEADLINE = ("mean_ttft_ms", "mean_itl_ms", "output_throughput", "request_goodput")
SLOWER = ("latency_us", "base_us", "pair_us", "setup_ms", "per_chunk_us", "per_page_us")
FASTER = ("eff", "hbm_eff", "nvl_gbps", "rdma_gbps", "intranode_gbps", "internode_gbps", "cache_gbps", "dram_gbps")


@dataclass(frozen=True)
class Perturbation:
    constant: str  # ``efficiency.step_overhead_us`` or ``calibration.gemm_fp8_block``
    kind: str
    rel_uncertainty: float
    low: HardwareProfile  # the constant at its low end (calibration models: faster)
    high: HardwareProfile
    note: str = ""


def _scale_model(params: dict, f: float) -> dict:
    """A calibration model made ``f`` times slower (f < 1: faster)."""
    out = dict(params)
    for k, v in params.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v)):
            if k in SLOWER:
                out[k] = float(v) * f
            elif k in FASTER:
                out[k] = float(v) / f
    return out


def perturbations(hw: HardwareProfile) -> list[Perturbation]:
    """One per constant with a stated uncertainty."""
    out = []
    for path, u in sorted(hw.uncertainty.items()):
        if not path.startswith("efficiency.") or u <= 0:
            continue
        name = path.split(".", 1)[1]
        v = float(getattr(hw.efficiency, name))
        lo, hi = v * (1 - u), v * (1 + u)
        note = ""
        if name in FRACTIONS and hi > 1.0:
            hi, note = 1.0, "upper end held at 1 (a fraction of peak)"
        if name == "deepep_normal_sm_share" and hi >= 1.0:
            hi, note = 0.99, "upper end held below 1 (a share)"
        lo = max(lo, 1e-6) if name in FRACTIONS else max(lo, 0.0)
        mk = lambda x, n=name: dataclasses.replace(hw, efficiency=dataclasses.replace(hw.efficiency, **{n: x}))
        out.append(Perturbation(path, hw.constant_kind(path), u, mk(lo), mk(hi), note))
    for model, p in sorted(hw.calibration.items()):
        u = float(p.get("rel_uncertainty", 0.0) or 0.0)
        if u <= 0:
            continue
        kind = calibration_kind(p).split(" ")[0]  # a copy of another system's fit says 'borrowed'
        mk = lambda f, m=model, q=p: dataclasses.replace(hw, calibration={**hw.calibration, m: _scale_model(q, f)})
        out.append(Perturbation(f"calibration.{model}", kind, u, mk(1.0 / (1.0 + u)), mk(1.0 + u),
                                "model times x 1/(1+u) and x (1+u)"))
    return out


@dataclass(frozen=True)
class Assumption:
    """A module-level constant of a price, with its relative uncertainty and when it matters."""

    module: str  # import path
    attr: str
    rel_uncertainty: float
    applies: Callable  # resolved scenario -> bool
    cap: float | None = None  # an upper bound of each value (a probability: 1)
    floor: float | None = None  # a lower bound of each value (a slowdown factor: 1)

    @property
    def constant(self) -> str:
        return f"{self.module.rsplit('.', 1)[1]}.{self.attr}"


def _groups(resolved):
    return [g for _r, _i, g in resolved.scenario.cluster.groups()]


def _moe(resolved) -> bool:
    return resolved.model.moe is not None


def _load(resolved, field: str) -> bool:
    spec = resolved.scenario.workload.expert_load
    return _moe(resolved) and (spec is None or getattr(spec, field) is None)


def _mtp_default(resolved) -> bool:
    return any(g.engine.speculative is not None and g.engine.speculative.accept_rates is None for g in _groups(resolved))


def _spec_host(resolved) -> bool:
    """A speculative group on hardware without its own measured host launch cost."""
    hw = resolved.hardware
    return any(g.engine.speculative is not None for g in _groups(resolved)) and \
        "kernel_launch_us" not in ((hw.calibration or {}).get("host") or {})


def _spec(resolved) -> bool:
    return any(g.engine.speculative is not None for g in _groups(resolved))


def _pd(field: str):
    return lambda r: (r.scenario.overheads is not None and getattr(r.scenario.overheads, field) is None
                      and r.scenario.cluster.disaggregated)


def _restarts(resolved) -> bool:
    return resolved.scenario.faults is not None or resolved.scenario.autoscaler is not None


def _graphs(resolved) -> bool:
    return any(g.engine.cuda_graph_max_bs > 0 for g in _groups(resolved))


def _always(resolved) -> bool:
    return True


def _mooncake_prior(field: str):
    """A disaggregated Mooncake run that prices ``field`` with the transfer module's prior
    (costs/transfer.py ``MOONCAKE_*``): the roofline cost model, or a profile without a fitted
    ``calibration.mooncake`` of it, and no scenario value of its own."""
    def applies(r) -> bool:
        sc, t = r.scenario, r.scenario.transfer
        if not (sc.cluster.disaggregated and t.backend == "mooncake"):
            return False
        if (field == "setup_ms" and t.setup_ms is not None) or (field == "per_chunk_us" and not t.batched) or \
                (field == "per_page_us" and (t.batched or t.per_page_us is not None)):
            return False
        calibrated = sc.cost_model != "roofline" and bool(r.hardware.calibration)
        return not (calibrated and field in (r.hardware.calibration.get("mooncake") or {}))
    return applies


def _attn(*backends: str):
    """A scenario with a group on one of ``backends`` (engine.attention_backend)."""
    return lambda r: any(g.engine.attention_backend in backends for g in _groups(r))


_AB = "pdsim.costs.attention_backends"


ASSUMPTIONS = (
    Assumption("pdsim.costs.pd_overheads", "ROUTER_MS", 1.0, _pd("router_ms")),
    Assumption("pdsim.costs.pd_overheads", "BOOTSTRAP_MS", 1.0, _pd("bootstrap_ms")),
    Assumption("pdsim.costs.pd_overheads", "CONNECT_MS", 1.0, _pd("connect_ms")),
    Assumption("pdsim.costs.restart", "PROCESS_S", 1.0, _restarts),
    Assumption("pdsim.costs.restart", "WEIGHT_LOAD_GBPS", 0.5, _restarts),
    Assumption("pdsim.costs.restart", "COMM_INIT_BASE_S", 1.0, _restarts),
    Assumption("pdsim.costs.restart", "COMM_INIT_PER_RANK_S", 1.0, _restarts),
    Assumption("pdsim.costs.restart", "GRAPH_CAPTURE_S", 1.0, _restarts),
    # accept lengths 1.8-1.9 / 2.4-2.7 / 2.9-3.3 (LMSYS 2025-09-26): the per-position rates within ~+-10%
    Assumption("pdsim.specs.features", "DEEPSEEK_MTP_ACCEPT", 0.1, _mtp_default, cap=1.0),
    # speculative steps (costs/speculative.py): the H100 host's launch cost borrowed for a host
    # sync elsewhere (host CPUs differ, +-50%); the verify's sampling bytes per vocabulary entry,
    # greedy argmax (4) up to softmax + top-k / top-p renormalisation + tree sampling (~2x)
    Assumption("pdsim.costs.speculative", "BORROWED_LAUNCH_HOST_US", 0.5, _spec_host),
    Assumption("pdsim.costs.speculative", "VERIFY_SAMPLE_BYTES", 1.0, _spec),
    Assumption("pdsim.specs.features", "DEFAULT_SKEW", 1.0, lambda r: _load(r, "skew")),
    Assumption("pdsim.specs.features", "DEFAULT_DRIFT", 1.0, lambda r: _load(r, "drift")),
    # measured (LMSYS decode balancedness 0.78-0.91: drift 0.06-0.20 around 0.100)
    Assumption("pdsim.specs.features", "DEFAULT_DECODE_DRIFT", 1.0, lambda r: _load(r, "decode_drift")),
    Assumption("pdsim.specs.memory", "CUDA_GRAPH_GIB_MOE", 0.6, lambda r: _graphs(r) and _moe(r)),
    Assumption("pdsim.specs.memory", "CUDA_GRAPH_GIB_DENSE", 0.6, lambda r: _graphs(r) and not _moe(r)),
    Assumption("pdsim.specs.memory", "DEEPEP_NORMAL_GIB", 1.0, lambda r: _moe(r) and any(g.ep > 1 for g in _groups(r))),
    # KV copies between P and D on one node go over NVLink (transfer_plan link 'nvlink'); a run
    # without such pairs shows no change
    Assumption("pdsim.costs.transfer", "NVLINK_SETUP_MS", 1.0,
               lambda r: r.scenario.cluster.disaggregated and r.scenario.transfer.setup_ms is None),
    Assumption("pdsim.costs.transfer", "NVLINK_PER_CHUNK_US", 1.0, lambda r: r.scenario.cluster.disaggregated),
    # the Mooncake priors of an uncalibrated transfer: setup 0.5-2 ms in the 1P1D measurements
    # (DOMAIN.md s4); the per-chunk / per-page costs from one SGLang PR #7236 transfer, carried to
    # other CPUs and NICs (assumption +-50%)
    Assumption("pdsim.costs.transfer", "MOONCAKE_SETUP_MS", 1.0, _mooncake_prior("setup_ms")),
    Assumption("pdsim.costs.transfer", "MOONCAKE_PER_CHUNK_US", 0.5, _mooncake_prior("per_chunk_us")),
    Assumption("pdsim.costs.transfer", "MOONCAKE_PER_PAGE_US", 0.5, _mooncake_prior("per_page_us")),
    Assumption("pdsim.costs.roofline", "W4A16_DEQUANT", 1.0,
               lambda r: r.model.quant is not None and bool(r.model.quant.weight_only)),
    Assumption("pdsim.costs.tbo", "COPY_HBM_PASSES", 0.5, lambda r: _moe(r) and any(
        g.engine.enable_two_batch_overlap and g.ep > 1 for g in _groups(r))),
    # 0.9 of the fitted intranode base (H100 12.8 / 13.6 us less ~1 us of NVLink in flight); range 0.5-1.0
    Assumption("pdsim.costs.tbo", "LL_STREAM_SHARE", 0.35, lambda r: _moe(r) and any(
        g.engine.enable_two_batch_overlap and g.ep > 1 for g in _groups(r)), cap=1.0),
    # DeepSeek's H800 profile vs DeepEP's unit test 1.31 / 1.21; SGLang's kernels 1.50 / 1.05
    # a slowdown: a kernel never runs faster beside compute than alone, so at least 1
    Assumption("pdsim.costs.tbo", "NORMAL_OVERLAP_SLOWDOWN", 0.2, lambda r: _moe(r) and any(
        g.engine.enable_two_batch_overlap and g.ep > 1 for g in _groups(r)), floor=1.0),
    # measured on one H100 with cuBLASLt FP8 GEMMs beside a proxy (calibration/data/overlap.csv: 1.05-1.34x
    # carved out, 1.09-1.72x beside); DeepGEMM and other GPUs are assumed to take the same multiples
    Assumption("pdsim.costs.sm_partition", "GEMM_CARVEOUT_K", 0.5, lambda r: _moe(r) and any(
        g.engine.enable_two_batch_overlap and g.ep > 1 for g in _groups(r))),
    Assumption("pdsim.costs.sm_partition", "GEMM_BESIDE_K", 0.5, lambda r: _moe(r) and any(
        g.engine.enable_two_batch_overlap and g.ep > 1 for g in _groups(r))),
    Assumption("pdsim.costs.sm_partition", "OTHER_BESIDE_K", 1.0, lambda r: _moe(r) and any(
        g.engine.enable_two_batch_overlap and g.ep > 1 for g in _groups(r))),
    Assumption("pdsim.costs.elementwise", "ATTN_KERNELS", 0.5, _always),
    Assumption("pdsim.costs.elementwise", "MLP_KERNELS", 0.5, _always),
    Assumption("pdsim.costs.elementwise", "HIDDEN_PASSES_ATTN", 0.5, _always),
    Assumption("pdsim.costs.elementwise", "HIDDEN_PASSES_MLP", 0.5, _always),
    Assumption("pdsim.costs.elementwise", "INTER_PASSES", 0.5, lambda r: _moe(r) or bool(r.model.ffn)),
    # DeepGEMM's cold-L2 weight stream (H800 README figure) carried to other Hopper GPUs
    Assumption("pdsim.costs.moe_kernels", "DEEPGEMM_WEIGHT_HBM", 0.15,
               lambda r: _moe(r) and any(g.ep > 1 for g in _groups(r)), cap=1.0),
    # attention backends without a published kernel figure (costs/attention_backends.py: the ranges there)
    Assumption(_AB, "FA3_MLA_DECODE", 0.2, _attn("flashmla", "flashinfer", "triton"), cap=1.0),
    Assumption(_AB, "FLASHINFER_PREFILL", 0.15, _attn("flashinfer", "flashmla"), cap=1.0),
    Assumption(_AB, "FLASHINFER_GQA_DECODE", 0.1, _attn("flashinfer")),
    Assumption(_AB, "TRITON_PREFILL", 0.3, _attn("triton"), cap=1.0),
    Assumption(_AB, "TRITON_MLA_DECODE_HBM", 0.33, _attn("triton"), cap=1.0),
    Assumption(_AB, "TRITON_MLA_DECODE_EFF", 0.4, _attn("triton"), cap=1.0),
    Assumption(_AB, "TRITON_GQA_DECODE", 0.25, _attn("triton"), cap=1.0),
    # measured on one H200 (0.486); other GPUs and torch versions unmeasured: 0.35 (FA2-era) to 0.77
    Assumption(_AB, "SDPA_PACKED", 0.375, _attn("sdpa_packed"), cap=1.0),
    # the packed form's key copies' HBM share, fitted on one H200 trace (0.241; 0.18-0.24 on the
    # same session's other traces); other GPUs and torch versions unmeasured
    Assumption(_AB, "SDPA_PACKED_HBM", 0.3, _attn("sdpa_packed"), cap=1.0),
)


def _scaled(v, f: float, cap: float | None, floor: float | None = None):
    if isinstance(v, tuple):
        return tuple(_scaled(x, f, cap, floor) for x in v)
    x = float(v) * f
    x = min(x, cap) if cap is not None else x
    return max(x, floor) if floor is not None else x


@contextmanager
def assumption_patch(a: Assumption, factor: float):
    """The module constant times ``factor`` (each element of a tuple; at most ``cap``, at least
    ``floor``) while inside, restored after."""
    mod = importlib.import_module(a.module)
    old = getattr(mod, a.attr)
    setattr(mod, a.attr, _scaled(old, factor, a.cap, a.floor))
    try:
        yield
    finally:
        setattr(mod, a.attr, old)


def _probe(resolved, hw: HardwareProfile) -> tuple[float, ...]:
    """Prices this scenario uses, at probe shapes: every group's prefill and decode step, and a
    KV transfer, and the steps' spread around them; a perturbation that changes none of them
    cannot move the simulation."""
    sc = resolved.scenario
    out = []
    for role, _i, g in sc.cluster.groups():
        c = build_step_cost(sc.cost_model if sc.cost_model != "auto" else ("calibrated" if hw.calibration else "roofline"),
                            hw, resolved.model, g, role, nic_gbit=sc.transfer.nic_gbit)
        for b in (1, 64, 1024):
            out.append(c.step_time(0, 0.0, 0, b * g.dp, b * g.dp * 2000.0))
        out.append(c.step_time(4096 * g.dp, 4096 * 4096 / 2.0 * g.dp, g.dp, 0, 0.0))
    if sc.cluster.disaggregated:
        p = sc.cluster.prefill[0]
        gpn = hw.gpus_per_node
        calibrated = sc.cost_model != "roofline" and bool(hw.calibration)
        plan = transfer_plan(resolved.model, hw, sc.transfer, 4096, p.world(gpn) // p.dp, p.engine.page_size,
                             p.engine.kv_cache_dtype, calibrated)
        out += [plan.fixed_s, plan.nbytes / flow_cap(hw, plan.senders, p.gpus_per_instance(gpn), sc.transfer.nic_gbit,
                                                     sc.transfer.backend, calibrated)]
    # the steps' spread around these prices (sim/engine/dispersion.py) moves no price, only the steps
    out += [hw.efficiency.step_cv, hw.efficiency.step_cv_tau_ms if hw.efficiency.step_cv > 0 else 0.0]
    return tuple(out)


def _headline(summary: dict) -> dict:
    return {k: summary.get(k) for k in HEADLINE}


def _rel(a, b) -> float:
    if a is None or b is None or not math.isfinite(a) or a == 0:
        return float("nan")
    return (b - a) / a


def sensitivity(resolved, only: list[str] | None = None,
                progress: Callable[[str], None] | None = None) -> tuple[dict, list[dict]]:
    """(baseline headline metrics, one row per constant with its low/high metrics and the
    largest relative change), rows sorted by that change, largest first."""
    from ..api import simulate

    base_hw = resolved.hardware
    base = _headline(simulate(resolved).summary())
    probe0 = _probe(resolved, base_hw)
    rows = []
    for pert in perturbations(base_hw):
        if only and not any(pert.constant.endswith(o) or pert.constant == o for o in only):
            continue
        if _probe(resolved, pert.low) == probe0 and _probe(resolved, pert.high) == probe0:
            continue  # not a price this scenario uses
        if progress:
            progress(pert.constant)
        lo = _headline(simulate(dataclasses.replace(resolved, hardware=pert.low)).summary())
        hi = _headline(simulate(dataclasses.replace(resolved, hardware=pert.high)).summary())
        swing = max((abs(x) for k in HEADLINE for x in (_rel(base[k], lo[k]), _rel(base[k], hi[k]))
                     if math.isfinite(x)), default=0.0)
        rows.append({"constant": pert.constant, "kind": pert.kind, "rel_uncertainty": pert.rel_uncertainty,
                     "low": lo, "high": hi, "max_rel_change": swing, "note": pert.note})
    for a in ASSUMPTIONS:
        if only and not any(a.constant.endswith(o) or a.constant == o for o in only):
            continue
        if not a.applies(resolved):
            continue  # not a price this scenario uses
        if progress:
            progress(a.constant)
        ends = []
        for f in (1.0 - a.rel_uncertainty, 1.0 + a.rel_uncertainty):
            with assumption_patch(a, max(f, 0.0)):
                ends.append(_headline(simulate(resolved).summary()))
        lo, hi = ends
        swing = max((abs(x) for k in HEADLINE for x in (_rel(base[k], lo[k]), _rel(base[k], hi[k]))
                     if math.isfinite(x)), default=0.0)
        rows.append({"constant": a.constant, "kind": "assumed", "rel_uncertainty": a.rel_uncertainty,
                     "low": lo, "high": hi, "max_rel_change": swing,
                     "note": "module constant" + (f", at most {a.cap:g}" if a.cap is not None else "")
                     + (f", at least {a.floor:g}" if a.floor is not None else "")})
    rows.sort(key=lambda r: -r["max_rel_change"])
    return base, rows


def sensitivity_table(base: dict, rows: list[dict]) -> str:
    names = {"mean_ttft_ms": "TTFT", "mean_itl_ms": "ITL", "output_throughput": "out tok/s", "request_goodput": "goodput"}
    head = "  ".join(f"{names[k]:>17}" for k in HEADLINE)
    lines = ["baseline: " + ", ".join(f"{names[k]} {base[k]:.4g}" for k in HEADLINE if base[k] is not None),
             f"{'constant':<36} {'kind':<8} {'+-u':>5}  {head}   (change at the low / high end)"]
    for r in rows:
        cells = []
        for k in HEADLINE:
            lo, hi = _rel(base[k], r["low"][k]), _rel(base[k], r["high"][k])
            cells.append(f"{lo:+7.1%} / {hi:+7.1%}" if math.isfinite(lo) and math.isfinite(hi) else f"{'-':>17}")
        lines.append(f"{r['constant']:<36} {r['kind']:<8} {r['rel_uncertainty']:>5.0%}  " + "  ".join(cells)
                     + (f"   [{r['note']}]" if r["note"] else ""))
    return "\n".join(lines)
