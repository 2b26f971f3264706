"""Collective and point-to-point communication prices (pure functions, seconds).

Formulas:
- ring all-reduce of ``nbytes`` over ``n`` ranks: 2 (n-1)/n x nbytes / bus_bw + 2 (n-1) x latency
  (NCCL's bus-bandwidth convention; AIConfigurator's 10 us point-to-point latency).
- DeepEP normal (prefill) dispatch/combine: bytes per rank split into an NVLink leg and an RDMA
  leg; the slower leg bounds the kernel (DeepEP reports "bottleneck bandwidth").
- DeepEP low-latency (decode): per-expert sends without node de-duplication; a fixed kernel
  latency plus bytes over the slower leg.
"""
from __future__ import annotations

import math


def ring_allreduce_s(nbytes: float, n: int, bus_bw: float, latency_s: float) -> float:
    if n <= 1 or nbytes <= 0:
        return 0.0
    return 2.0 * (n - 1) / n * nbytes / bus_bw + 2.0 * (n - 1) * latency_s


def expected_distinct(draws: float, k: int, pool: int) -> float:
    """Expected number of distinct items of ``pool`` touched when ``draws`` groups each pick
    ``k`` distinct items uniformly: pool x (1 - (1 - k/pool)^draws)."""
    if pool <= 0 or draws <= 0:
        return 0.0
    return pool * (1.0 - (1.0 - min(k, pool) / pool) ** draws)


def deepep_legs(tokens_per_rank: float, hidden: int, top_k: int, world: int, gpus_per_node: int,
                elem_bytes: float, dedup_nodes: bool, max_nodes_per_token: int = 4) -> tuple[float, float]:
    """(NVLink bytes, RDMA bytes) one rank sends in one dispatch (or combine).

    Each token goes to ``top_k`` experts spread uniformly over ``world`` ranks. Normal kernels
    send a token once per destination node over RDMA (then fan out over NVLink); low-latency
    kernels send one copy per expert. DeepSeek-V3 routing limits a token to 4 nodes.
    """
    nodes = max(1, world // gpus_per_node)
    tok_bytes = tokens_per_rank * hidden * elem_bytes
    if nodes == 1:
        return tok_bytes * top_k * (world - 1) / world, 0.0
    local_share = gpus_per_node / world
    if dedup_nodes:
        remote_nodes = min(expected_distinct(1, top_k, nodes), max_nodes_per_token) * (nodes - 1) / nodes
        rdma = tok_bytes * remote_nodes
        nvl = tok_bytes * top_k * (gpus_per_node - 1) / gpus_per_node
    else:
        rdma = tok_bytes * top_k * (1 - local_share)
        nvl = tok_bytes * top_k * local_share * (gpus_per_node - 1) / gpus_per_node
    return nvl, rdma


def moe_imbalance(assignments_per_rank: float, ranks: int) -> float:
    """Max/mean load over ``ranks`` when assignments scatter at random (Poisson tail):
    1 + sqrt(2 ln ranks / mean). EPLB redundancy is modelled by the caller's calibration."""
    if ranks <= 1 or assignments_per_rank <= 0:
        return 1.0
    return 1.0 + math.sqrt(2.0 * math.log(ranks) / max(assignments_per_rank, 1.0))
