"""Hardware profiles: one YAML per GPU system (GPU + node + NICs + host), every figure sourced.

Units in field names: ``_tflops`` = 1e12 FLOP/s, ``_tops`` = 1e12 integer op/s, ``_gbps`` =
1e9 bytes/s, ``_gbit`` = 1e9 bit/s, ``_gib`` = 2**30 bytes, ``_us`` = microseconds. Derived
properties return SI (bytes, bytes/s, FLOP/s, seconds).

Every constant of a profile is one of four kinds, which ``pdsim calibrate report`` lists:
``measured`` (a datasheet or a published measurement), ``fitted`` (written by ``pdsim calibrate
fit`` from calibration/data), ``derived`` (computed from another measured GPU or from this GPU's
own specs) or ``assumed`` (a prior with no measurement behind it). ``uncertainty`` gives each
assumed or derived constant its relative uncertainty (0.5 = +-50%), which ``pdsim sensitivity``
perturbs by.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

from ._convert import check

GIB = 2**30

Arch = Literal["ampere", "ada", "hopper", "blackwell", "cpu"]


# The DeepEP low-latency kernels' constants (costs/deepep.py ``ll_time_s``): microsecond costs
# are >= 0, bandwidths (1e9 B/s) > 0; ``pair_us`` may be absent (no per-remote-pair cost), and a negative
# one would make every remote pair speed the kernel up.
_DEEPEP_LL = (("base_us", ">= 0", True), ("pair_us", ">= 0", False), ("nvl_gbps", "> 0", True),
              ("rdma_gbps", "> 0", True))


def _check_constants(p: Any, where: str, rules, what: str) -> None:
    """Refuse a calibration entry whose constants (``rules``: name, ">= 0" or "> 0", required) the
    price could not use, naming the field."""
    check(isinstance(p, dict), f"expected a mapping of {', '.join(r[0] for r in rules)}", where)
    for key, rule, required in rules:
        v = p.get(key)
        if v is None:
            check(not required, f"missing (a number {rule}, {what})", f"{where}.{key}")
            continue
        check(isinstance(v, (int, float)) and not isinstance(v, bool), f"expected a number {rule}, got {v!r}",
              f"{where}.{key}")
        ok = v >= 0.0 and v != float("inf") if rule == ">= 0" else v > 0.0
        check(ok, f"must be {rule}{' and finite' if rule == '>= 0' else ''}, got {v}", f"{where}.{key}")


#: calibration.kv_residency (calibrate/kv_residency.py): the cache size in bytes >= 0 (0: one rate),
#: the KV read rates from the cache and from DRAM (1e9 B/s) > 0, the cliff's spread in log size >= 0
_KV_RESIDENCY = (("cache_bytes", ">= 0", True), ("cache_gbps", "> 0", True), ("dram_gbps", "> 0", True),
                 ("cache_log_width", ">= 0", False))


def _check_kv_residency(p: Any, where: str) -> None:
    """Refuse a ``calibration.kv_residency`` entry the decode price could not use: DRAM faster than
    the cache would make a step faster where its context outgrows the cache."""
    _check_constants(p, where, _KV_RESIDENCY, "costs/roofline.py")
    check(p["dram_gbps"] <= p["cache_gbps"],
          f"the KV read rate from DRAM ({p['dram_gbps']}) must not exceed the cache's ({p['cache_gbps']}): more "
          "context would make a decode step faster", f"{where}.dram_gbps")


CALIBRATION_LABELS = ("borrowed", "measured")  # ``label`` of a calibration model: calibration_kind


def _check_calibration_model(p: Any, where: str) -> None:
    """Refuse the two keys of a calibration model that its kind and its perturbation read
    (``calibration_kind``, calibrate/sensitivity.py) when they are not what those expect: a
    ``label`` outside CALIBRATION_LABELS would be listed under another kind without a word, a
    ``rel_uncertainty`` that is no number >= 0 would stop ``pdsim sensitivity`` or be skipped."""
    if not isinstance(p, dict):
        return  # the converter names the field (expected a mapping)
    if "label" in p:
        check(p["label"] in CALIBRATION_LABELS,
              f"expected one of {', '.join(CALIBRATION_LABELS)} (or no label: derived / fitted from its other keys), "
              f"got {p['label']!r}", f"{where}.label")
    if "rel_uncertainty" in p:
        u = p["rel_uncertainty"]
        check(isinstance(u, (int, float)) and not isinstance(u, bool) and 0.0 <= float(u) < float("inf"),
              f"expected a relative uncertainty, a number >= 0, got {u!r}", f"{where}.rel_uncertainty")


@dataclass(frozen=True)
class GPUSpec:
    """One accelerator. Peak figures are dense (no sparsity), from datasheets.

    ``nvlink_gbps`` 0 means no NVLink: GPU-to-GPU traffic inside a node crosses PCIe
    (``peer_bytes_per_s``). ``arch`` names the SM generation whose kernels (tile shapes,
    achievable fractions of peak) a GPU without measurements of its own borrows."""

    name: str
    bf16_tflops: float
    fp8_tflops: float  # 0 where the GPU has no FP8 tensor cores (A100/A800/A10)
    hbm_gib: float
    hbm_gbps: float
    nvlink_gbps: float  # total, both directions, per GPU; 0 = none (PCIe peers)
    pcie_gen: int
    pcie_gbps: float  # achievable host<->device per direction
    int8_tops: float = 0.0  # dense INT8 tensor throughput (W8A8 int8 GEMMs); 0 = unknown/none
    arch: Arch = "hopper"
    sms: int = 0  # streaming multiprocessors (0 = unknown): per-SM throughput of kernels (calibrate/fit.py)
    # peak FLOP/s (TFLOP/s) the attention kernels' arithmetic runs at where it is not the BF16 GEMM's:
    # a CPU without BF16 matmul units runs vLLM's attention in FP32 vector FMAs (cpu_attn "vec"
    # ISA) while its BF16 linear layers fall back to an emulated GEMM several times slower; 0 = bf16_tflops
    attn_tflops: float = 0.0

    def __post_init__(self) -> None:
        for f in ("bf16_tflops", "hbm_gib", "hbm_gbps", "pcie_gbps"):
            check(getattr(self, f) > 0, f"must be > 0, got {getattr(self, f)}", f)
        for f in ("fp8_tflops", "nvlink_gbps", "int8_tops", "sms", "attn_tflops"):
            check(getattr(self, f) >= 0, f"must be >= 0, got {getattr(self, f)}", f)
        check(self.pcie_gen in (3, 4, 5, 6), f"expected 3, 4, 5 or 6, got {self.pcie_gen}", "pcie_gen")

    def peak_flops(self, dtype: str) -> float:
        """Peak dense FLOP/s (op/s for int8) of GEMMs in ``dtype``: 'bf16', 'fp8' (falls back
        to BF16 without FP8 units) or 'int8' (falls back to the FP8, then BF16 rate); 'attn': the
        attention kernels' arithmetic (``attn_tflops``, else the BF16 rate)."""
        if dtype == "attn":
            return (self.attn_tflops or self.bf16_tflops) * 1e12
        if dtype == "int8" and self.int8_tops > 0:
            return self.int8_tops * 1e12
        if dtype in ("fp8", "int8") and self.fp8_tflops > 0:
            return self.fp8_tflops * 1e12
        return self.bf16_tflops * 1e12

    def ridge_point(self, dtype: str = "bf16") -> float:
        """FLOP per HBM byte at which a kernel turns from memory- to compute-bound (peak/BW)."""
        return self.peak_flops(dtype) / (self.hbm_gbps * 1e9)

    @property
    def hbm_bytes(self) -> float:
        return self.hbm_gib * GIB

    @property
    def nvlink_bytes_per_s(self) -> float:
        """Per-direction NVLink bandwidth (half the bidirectional total), bytes/s; 0 without NVLink."""
        return self.nvlink_gbps * 1e9 / 2

    @property
    def peer_bytes_per_s(self) -> float:
        """Per-direction GPU-to-GPU bandwidth inside a node: NVLink, else PCIe peer-to-peer."""
        return self.nvlink_bytes_per_s if self.nvlink_gbps > 0 else self.pcie_gbps * 1e9


@dataclass(frozen=True)
class NodeSpec:
    gpus_per_node: int
    nics_per_node: int
    nic_gbit: float  # line rate of one NIC
    host_dram_gib: float

    def __post_init__(self) -> None:
        check(self.gpus_per_node >= 1, "must be >= 1", "gpus_per_node")
        check(self.nics_per_node >= 1, "must be >= 1", "nics_per_node")
        check(self.nic_gbit > 0, "must be > 0", "nic_gbit")
        check(self.host_dram_gib > 0, "must be > 0", "host_dram_gib")

    @property
    def nic_bytes_per_s(self) -> float:
        return self.nic_gbit * 1e9 / 8


FRACTIONS = ("gemm", "attention", "mla_decode", "mla_decode_hbm", "hbm", "nvlink", "nic", "pcie")
SHARES = ("deepep_normal_sm_share",)


@dataclass(frozen=True)
class Efficiency:
    """Achievable fractions of peak and fixed overheads used by the roofline prices.

    These are the priors of the first-principles model; ``pdsim calibrate fit`` replaces the
    kernel ones with fitted constants (``HardwareProfile.calibration``). Each profile cites
    the source of every value or labels it an assumption (``sources``)."""

    gemm: float = 0.70  # large-M GEMM fraction of peak tensor FLOP/s
    gemm_m_tile: float = 16.0  # BF16 GEMM M granularity: rows a tile computes (mma.sync m16)
    fp8_m_tile: float = 64.0  # FP8 GEMM M granularity (SM90 FP8 math is WGMMA-only: m64)
    attention: float = 0.50  # prefill attention kernels' fraction of peak BF16 FLOP/s
    mla_decode: float = 0.586  # MLA decode (FlashMLA-shaped) fraction of peak BF16 FLOP/s
    mla_decode_hbm: float = 0.895  # MLA decode fraction of HBM bandwidth on KV (latent) reads
    hbm: float = 0.80  # achievable fraction of HBM bandwidth (AIConfigurator: 0.8)
    nvlink: float = 0.80  # achievable NVLink fraction (DeepEP: ~160 of 200 GB/s per direction)
    nic: float = 0.85  # achievable RDMA fraction of NIC line rate
    pcie: float = 1.0  # pcie_gbps is already an achievable figure
    mem_latency_us: float = 3.0  # per memory-bound kernel
    p2p_latency_us: float = 10.0  # per point-to-point message (NCCL send/recv, per layer)
    allreduce_base_us: float = 5.4  # small-message all-reduce: launch + one-shot/NVLS sync
    allreduce_hop_us: float = 0.86  # small-message all-reduce: per extra rank (x 2 (n-1))
    layer_launch_us: float = 25.0  # eager per-layer launch + framework overhead
    graph_launch_us: float = 5.0  # per-layer cost when replaying a CUDA graph
    step_overhead_us: float = 2000.0  # per-step scheduler/sampling CPU overhead
    seq_overhead_us: float = 0.0  # per-sequence per-step host work (inputs, sampling, output processing)
    ctx_overhead_ns: float = 0.0  # per-step host work per context token of the decode batch (CPU engine)
    # per prompt token of the step: work outside the timed GEMM and attention kernels that grows with
    # the prefill's tokens (CPU engine: SGLang's torch-native RMSNorm, RoPE, SiLU and KV writes)
    prefill_token_ns: float = 0.0
    # eager launches from the layer's structure (costs/host.py): per kernel launch and per module
    # call; both 0 = the flat layer_launch_us per layer
    kernel_launch_us: float = 0.0
    module_call_us: float = 0.0
    tokenize_ns: float = 0.0  # per prompt token on the API server (text prompts); 0 = prompts sent as token ids
    deepep_normal_sm_share: float = 0.18  # SMs DeepEP normal kernels hold while overlapped (24 of 132)
    # a step's time around its price at one shape (sim/engine/dispersion.py): coefficient of
    # variation and how long a slow or fast phase lasts (ms); 0 = every step takes its price
    step_cv: float = 0.0
    step_cv_tau_ms: float = 0.0

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            check(v >= 0, f"must be >= 0, got {v}", f.name)
            if f.name in FRACTIONS:
                check(0 < v <= 1, f"a fraction of peak must be in (0, 1], got {v}", f.name)
        check(self.gemm_m_tile >= 1, "must be >= 1 (rows)", "gemm_m_tile")
        check(self.fp8_m_tile >= 1, "must be >= 1 (rows)", "fp8_m_tile")
        for f in SHARES:
            check(getattr(self, f) < 1, f"must be in [0, 1), got {getattr(self, f)}", f)
        check(self.step_cv < 2, f"a coefficient of variation must be in [0, 2), got {self.step_cv}", "step_cv")
        check(self.step_cv_tau_ms < float("inf"), "must be finite", "step_cv_tau_ms")

    def m_tile(self, dtype: str) -> float:
        """GEMM M granularity of kernels in ``dtype`` (FP8 kernels have their own)."""
        return self.fp8_m_tile if dtype.startswith("fp8") else self.gemm_m_tile


MACHINE_KEYS = {"cpu_model", "cpu_flags", "cores", "gpu", "gpu_driver", "libraries", "remeasure", "measured",
                "host_processes"}  # host_processes: busy processes sharing the cores while host work was measured


@dataclass(frozen=True)
class HardwareProfile:
    """A GPU system: accelerator, node layout and fabric, with sources and calibrated constants.

    ``uncertainty`` maps a constant's path (``efficiency.step_overhead_us``) to its relative
    uncertainty; fitted constants carry theirs in ``calibration`` (``heldout_mape``)."""

    name: str
    description: str
    gpu: GPUSpec
    node: NodeSpec
    efficiency: Efficiency = field(default_factory=Efficiency)
    sources: dict[str, str] = field(default_factory=dict)
    uncertainty: dict[str, float] = field(default_factory=dict)
    calibration: dict[str, dict[str, float | str]] = field(default_factory=dict)
    # where a measured profile was measured (pdsim/specs/machine.py); {} = a datasheet profile
    machine: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.machine) - MACHINE_KEYS)
        check(not unknown, f"unknown key(s) {', '.join(unknown)}; expected some of {', '.join(sorted(MACHINE_KEYS))}",
              "machine")
        required = ["gpu.bf16_tflops", "gpu.hbm_gbps", "gpu.nvlink_gbps", "node.nic_gbit"]
        missing = [k for k in required if k not in self.sources]
        check(not missing, f"every figure needs a source; missing {', '.join(missing)}", "sources")
        for model, params in self.calibration.items():
            _check_calibration_model(params, f"calibration.{model}")
        for op in ("dispatch", "combine"):
            if f"deepep_ll_{op}" in self.calibration:
                _check_constants(self.calibration[f"deepep_ll_{op}"], f"calibration.deepep_ll_{op}", _DEEPEP_LL,
                                 "costs/deepep.py")
        if "kv_residency" in self.calibration:
            _check_kv_residency(self.calibration["kv_residency"], "calibration.kv_residency")
        eff = {f"efficiency.{f.name}" for f in fields(Efficiency)}
        for k, v in self.uncertainty.items():
            check(k in eff or k.startswith("calibration."), f"unknown constant {k!r}", f"uncertainty.{k}")
            check(0 <= v < 10, f"a relative uncertainty must be in [0, 10), got {v}", f"uncertainty.{k}")

    @property
    def gpus_per_node(self) -> int:
        return self.node.gpus_per_node

    @property
    def nic_bytes_per_gpu(self) -> float:
        """RDMA bytes/s one GPU can drive (its share of the node's NICs), line rate."""
        return self.node.nic_bytes_per_s * self.node.nics_per_node / self.node.gpus_per_node

    def constant_kind(self, path: str) -> str:
        """'measured', 'fitted', 'derived', 'borrowed', 'assumed' or 'unused' for a constant
        (``efficiency.<name>``, ``gpu.<name>``) from its source text (a source starting with
        'assum' or 'prior' is an assumption, with 'derived' a derivation, with 'borrowed' another
        tool's modelling factor, not a measurement, with 'fit' a fit, with 'unused' a constant
        no price of this device reads)."""
        src = self.sources.get(path, "").strip().lower()
        if src.startswith("unused"):
            return "unused"
        if not src or src.startswith(("assum", "prior")):
            return "assumed"
        if src.startswith("borrowed"):
            return "borrowed"
        if src.startswith("derived"):
            return "derived"
        if src.startswith("fit"):
            return "fitted"
        return "measured"


def calibration_kind(params: dict) -> str:
    """'measured', 'borrowed', 'derived' or 'fitted' (partly derived or borrowed) for one model of
    a profile's ``calibration`` block: its ``label`` where the fit wrote one (a copy of another
    system's fit says 'borrowed'), else from the keys that say where its constants came from."""
    if params.get("label") in CALIBRATION_LABELS:
        return str(params["label"])
    if "derived_from" in params:
        return "derived"
    if "partly_from" in params:
        return "fitted (partly derived)"
    if "pair_from" in params or "base_from" in params:  # a constant held at another system's fit (DeepEP)
        return "fitted (partly borrowed)"
    return "fitted"


def load_hardware(path: str | Path, resolve_base=None) -> HardwareProfile:
    """A profile YAML; one with ``base:`` is an overlay on another profile (specs/overlay.py),
    found by ``resolve_base`` (default: a path next to the overlay; the catalog's knows bundled keys)."""
    from ._convert import build
    from .errors import SpecError
    from .overlay import hardware_data, relative_base

    try:
        return build(HardwareProfile, hardware_data(path, resolve_base or relative_base))
    except SpecError as err:
        raise err.at(source=err.source or str(path)) from None
