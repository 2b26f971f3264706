"""Collective and point-to-point communication prices (pure functions, seconds).

Formulas:
- ring all-reduce of ``nbytes`` over ``n`` ranks: 2 (n-1)/n x nbytes / bus_bw + 2 (n-1) x latency
  (NCCL's bus-bandwidth convention; AIConfigurator's 10 us point-to-point latency).
- DeepEP legs (``deepep_legs``): bytes one rank sends per dispatch/combine over NVLink and
  over RDMA; normal kernels de-duplicate per destination rank and node, low-latency kernels
  send one copy per expert. The kernel prices are in deepep.py (fitted) and roofline.py.
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
    """(NVLink bytes, RDMA bytes) one rank sends in one dispatch (or receives in a combine).

    Each token picks ``top_k`` experts spread uniformly over ``world`` ranks.
    - low-latency kernels (``dedup_nodes`` False) send one copy per expert: the copies for
      ranks of the same node go over NVLink, the others over RDMA;
    - normal kernels send a token once per destination rank inside a node (expected distinct
      ranks ``world (1 - (1 - 1/world)^top_k)``, DeepEP's own byte count) and, across nodes,
      once per destination node over RDMA (expected distinct nodes, at most
      ``max_nodes_per_token``: DeepSeek-V3's node-limited routing, 4), then forward over
      NVLink to the destination ranks.
    """
    nodes = max(1, world // gpus_per_node)
    tok_bytes = tokens_per_rank * hidden * elem_bytes
    if not dedup_nodes:
        if nodes == 1:
            return tok_bytes * top_k * (world - 1) / world, 0.0
        local_share = gpus_per_node / world
        return (tok_bytes * top_k * local_share * (gpus_per_node - 1) / gpus_per_node,
                tok_bytes * top_k * (1 - local_share))
    ranks = world * (1.0 - (1.0 - 1.0 / world) ** top_k)
    if nodes == 1:
        return tok_bytes * ranks * (world - 1) / world, 0.0
    node_hits = min(nodes * (1.0 - (1.0 - 1.0 / nodes) ** top_k), max_nodes_per_token)
    return tok_bytes * ranks * (gpus_per_node - 1) / gpus_per_node, tok_bytes * node_hits * (nodes - 1) / nodes


def moe_imbalance(assignments_per_rank: float, ranks: int) -> float:
    """Max/mean load over ``ranks`` when assignments scatter at random (Poisson tail):
    1 + sqrt(2 ln ranks / mean). EPLB redundancy is modelled by the caller's calibration."""
    if ranks <= 1 or assignments_per_rank <= 0:
        return 1.0
    return 1.0 + math.sqrt(2.0 * math.log(ranks) / max(assignments_per_rank, 1.0))
