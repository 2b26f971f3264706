"""DeepEP all-to-all prices with fitted constants (seconds).

Both kernels move each rank's tokens to the ranks holding their top-k experts, one leg over
NVLink (inside the node) and one over RDMA (to other nodes); bytes per leg come from
``comm.deepep_legs`` (FP8 dispatch = 1 byte per hidden element plus one FP32 scale per 128,
BF16 combine = 2).

- low latency (decode; one copy per expert, no node de-duplication; the NVLink and RDMA
  sends of a rank are issued by the same warps, so their times add):
      t = base + nvl_bytes / nvl_bw + rdma_bytes / rdma_bw
- normal (prefill; one copy per destination rank inside a node, one RDMA copy per destination
  node across nodes, then NVLink forwarding inside the destination node). Inside one node
  NVLink carries everything; across nodes the RDMA sends and the NVLink forwarding run
  concurrently (separate warps, pipelined through chunked buffers), so the slower leg bounds
  the kernel:
      t = base + nvl_bytes / nvl_bw                                 (one node)
      t = base + max(nvl_fwd_bytes / nvl_bw, rdma_bytes / rdma_bw)  (several nodes)
  With H800's NVLink (~134 GB/s of link bytes, the README's EP8 row) the forwarding leg is the
  slower one at EP16 (two nodes: a token crosses RDMA once but is forwarded to ~5.6 ranks) and
  RDMA from EP32 on: the README's internode "RDMA bottleneck" GB/s at EP16 (43, vs 58 / 51 at
  EP32 / EP64) is that NVLink bound seen through the RDMA byte count.

Units: ``base_us`` microseconds, ``nvl_gbps`` / ``rdma_gbps`` 1e9 bytes/s per GPU.
Constants per hardware profile (``calibration.deepep_ll_dispatch``, ``deepep_ll_combine``,
``deepep_normal_dispatch``, ``deepep_normal_combine``), fitted by ``pdsim calibrate fit`` to
calibration/data/deepep_low_latency.csv and deepep_normal.csv (DeepEP README tables on H800;
AIConfigurator's SGLang DeepEP tables on H100/H200, EP8 to EP64).

Both forms are linear in tokens per rank (bytes are), so a step model precomputes
``(base_s, sm_seconds_per_token, flight_seconds_per_token)`` with ``linear_coeffs``.
"""
from __future__ import annotations

from .comm import FP8_DISPATCH_BYTES, deepep_legs

ELEM_BYTES = {"dispatch": FP8_DISPATCH_BYTES, "combine": 2.0}


def ll_time_s(params: dict, tokens_per_rank: float, hidden: int, top_k: int, ep: int, gpn: int, elem_bytes: float) -> float:
    nvl, rdma = deepep_legs(tokens_per_rank, hidden, top_k, ep, gpn, elem_bytes, dedup_nodes=False)
    return float(params["base_us"]) * 1e-6 + nvl / (float(params["nvl_gbps"]) * 1e9) + rdma / (float(params["rdma_gbps"]) * 1e9)


def normal_time_s(params: dict, tokens_per_rank: float, hidden: int, top_k: int, ep: int, gpn: int, elem_bytes: float) -> float:
    nvl, rdma = deepep_legs(tokens_per_rank, hidden, top_k, ep, gpn, elem_bytes, dedup_nodes=True)
    leg = nvl / (float(params["nvl_gbps"]) * 1e9)
    if rdma > 0:
        leg = max(leg, rdma / (float(params["rdma_gbps"]) * 1e9))
    return float(params["base_us"]) * 1e-6 + leg


def linear_coeffs(params: dict, low_latency: bool, hidden: int, top_k: int, ep: int, gpn: int,
                  elem_bytes: float, rdma_scale: float = 1.0) -> tuple[float, float, float]:
    """(base seconds, SM-driven seconds per token per rank, in-flight seconds per token per rank)
    of one kernel; their sum is the kernel's time. ``rdma_scale`` scales the fitted RDMA
    bandwidth for what-if NICs (line-rate ratio).

    The split says which part of a kernel two-batch overlap can hide (step.py): low-latency
    kernels copy the NVLink leg with their own SMs (loads and stores by the sending warps), while
    the RDMA leg and the base latency are in flight on the NIC (IBGDA puts; DeepEP README: the
    hook-based receive "does not occupy any SM resource"). Normal kernels run on their own
    fixed SM partition (``deepep_normal_sm_share``), so all of their time is comm-stream time."""
    nvl, rdma = deepep_legs(1.0, hidden, top_k, ep, gpn, elem_bytes, dedup_nodes=not low_latency)
    a = nvl / (float(params["nvl_gbps"]) * 1e9)
    b = rdma / (float(params["rdma_gbps"]) * 1e9 * rdma_scale) if rdma > 0 else 0.0
    base = float(params["base_us"]) * 1e-6
    if low_latency:
        return base, a, b
    return base, 0.0, (max(a, b) if rdma > 0 else a)
