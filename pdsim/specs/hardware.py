"""Hardware profiles: one YAML per GPU system (GPU + node + NICs + host), every figure sourced.

Units in field names: ``_tflops`` = 1e12 FLOP/s, ``_gbps`` = 1e9 bytes/s, ``_gbit`` = 1e9 bit/s,
``_gib`` = 2**30 bytes, ``_us`` = microseconds. Derived properties return SI (bytes, bytes/s,
FLOP/s, seconds).
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path

from ._convert import check, load_spec

GIB = 2**30


@dataclass(frozen=True)
class GPUSpec:
    """One accelerator. Peak figures are dense (no sparsity), from datasheets."""

    name: str
    bf16_tflops: float
    fp8_tflops: float  # 0 where the GPU has no FP8 tensor cores (A100/A800)
    hbm_gib: float
    hbm_gbps: float
    nvlink_gbps: float  # total, both directions, per GPU
    pcie_gen: int
    pcie_gbps: float  # achievable host<->device per direction

    def __post_init__(self) -> None:
        for f in ("bf16_tflops", "hbm_gib", "hbm_gbps", "nvlink_gbps", "pcie_gbps"):
            check(getattr(self, f) > 0, f"must be > 0, got {getattr(self, f)}", f)
        check(self.fp8_tflops >= 0, "must be >= 0", "fp8_tflops")
        check(self.pcie_gen in (3, 4, 5, 6), f"expected 3, 4, 5 or 6, got {self.pcie_gen}", "pcie_gen")

    def peak_flops(self, dtype: str) -> float:
        """Peak dense FLOP/s for GEMMs in ``dtype`` ('fp8' falls back to BF16 without FP8 units)."""
        if dtype == "fp8" and self.fp8_tflops > 0:
            return self.fp8_tflops * 1e12
        return self.bf16_tflops * 1e12

    @property
    def hbm_bytes(self) -> float:
        return self.hbm_gib * GIB

    @property
    def nvlink_bytes_per_s(self) -> float:
        """Per-direction NVLink bandwidth (half the bidirectional total), bytes/s."""
        return self.nvlink_gbps * 1e9 / 2


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


@dataclass(frozen=True)
class Efficiency:
    """Achievable fractions of peak and fixed overheads used by the roofline prices.

    These are the free constants that calibration refits (issue: calibrated cost models);
    the defaults in each profile cite the measurement they come from.
    """

    gemm: float = 0.70  # large-GEMM fraction of peak tensor FLOP/s
    gemm_m_half: float = 64.0  # tokens at which a GEMM reaches half its large-M efficiency
    attention: float = 0.50  # attention kernels' fraction of peak FLOP/s
    hbm: float = 0.80  # achievable fraction of HBM bandwidth (AIConfigurator: 0.8)
    nvlink: float = 0.80  # achievable NVLink fraction (DeepEP: ~160 of 200 GB/s per direction)
    nic: float = 0.85  # achievable RDMA fraction of NIC line rate
    pcie: float = 1.0  # pcie_gbps is already an achievable figure
    mem_latency_us: float = 3.0  # per memory-bound kernel
    p2p_latency_us: float = 10.0  # per collective / point-to-point hop
    layer_launch_us: float = 25.0  # eager per-layer launch + framework overhead
    graph_launch_us: float = 5.0  # per-layer cost when replaying a CUDA graph
    step_overhead_us: float = 2000.0  # per-step scheduler/sampling CPU overhead
    tbo_overlap_loss: float = 0.1  # two-batch overlap: share of the shorter of compute/comm left exposed (prior)

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            check(v >= 0, f"must be >= 0, got {v}", f.name)
            if f.name in ("gemm", "attention", "hbm", "nvlink", "nic", "pcie"):
                check(0 < v <= 1, f"a fraction of peak must be in (0, 1], got {v}", f.name)


@dataclass(frozen=True)
class HardwareProfile:
    """A GPU system: accelerator, node layout and fabric, with sources and calibrated constants."""

    name: str
    description: str
    gpu: GPUSpec
    node: NodeSpec
    efficiency: Efficiency = field(default_factory=Efficiency)
    sources: dict[str, str] = field(default_factory=dict)
    calibration: dict[str, dict[str, float | str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        required = ["gpu.bf16_tflops", "gpu.hbm_gbps", "gpu.nvlink_gbps", "node.nic_gbit"]
        missing = [k for k in required if k not in self.sources]
        check(not missing, f"every figure needs a source; missing {', '.join(missing)}", "sources")

    @property
    def gpus_per_node(self) -> int:
        return self.node.gpus_per_node

    @property
    def nic_bytes_per_gpu(self) -> float:
        """RDMA bytes/s one GPU can drive (its share of the node's NICs), line rate."""
        return self.node.nic_bytes_per_s * self.node.nics_per_node / self.node.gpus_per_node


def load_hardware(path: str | Path) -> HardwareProfile:
    return load_spec(HardwareProfile, path)
