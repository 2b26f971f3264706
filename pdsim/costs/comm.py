"""Collective and point-to-point communication prices (pure functions, seconds).

All-reduce of ``nbytes`` over ``n`` ranks (NCCL's bus-bandwidth convention):

    t = base + 2 (n - 1) x hop + 2 (n - 1) / n x nbytes / busbw

``base`` is the launch and synchronisation of one collective and ``hop`` the latency each
extra rank adds. For small messages NCCL picks one-shot / NVLS / tree algorithms whose latency
grows far slower than a ring's 2 (n - 1) point-to-point hops: fitted on AIConfigurator's H100
NCCL 2.29 table, base 5.4 us and hop 0.86 us, so a TP8 all-reduce of a decode batch costs
~17 us (measured 15.6-25 us for 1 KB-1 MB), not 2 x 7 x 10 us = 140 us. ``busbw`` is NVLink's
inside a node and the NIC's share across nodes.

DeepEP legs (``deepep_legs``): bytes one rank sends per dispatch/combine over NVLink and over
RDMA; normal kernels de-duplicate per destination rank and node, low-latency kernels send one
copy per expert. The kernel prices are in deepep.py (fitted) and roofline.py. The legs count
the bytes that cross a link only: the rows a rank keeps for itself and, across nodes, the copy
for its own node never touch the NIC. DeepEP's own benchmarks report normal-kernel bandwidth
over a larger count that includes the tokens a rank "sends" to its own node
(tests/legacy/test_internode.py: ``num_rdma_token_sent`` counts every destination node, the
local one too) and to itself (``recv_x`` includes its own rows): ``deepep_reported_bytes`` keeps
that count, only to turn a published GB/s back into the kernel's time before fitting. Fitting
the link bytes makes the fitted RDMA bandwidth a property of the NIC: it comes out alike on
H800 (DeepEP README) and H100 (AIConfigurator's times), ~45 GB/s per 400 Gb/s NIC, where the
reported count gave 51 and 62-69 GB/s for the same NIC (physics review 2026-11-26).
"""
from __future__ import annotations

import math

FP8_DISPATCH_BYTES = 1.0 + 4.0 / 128  # FP8 element + one FP32 scale per 128 channels (DeepEP tests)


def allreduce_s(nbytes: float, n: int, base_s: float, hop_s: float, busbw: float) -> float:
    """Seconds of one all-reduce of ``nbytes`` over ``n`` ranks at bus bandwidth ``busbw``."""
    if n <= 1:
        return 0.0
    return base_s + 2.0 * (n - 1) * hop_s + 2.0 * (n - 1) / n * nbytes / busbw


def ring_allreduce_s(nbytes: float, n: int, bus_bw: float, latency_s: float) -> float:
    """Ring all-reduce with one point-to-point latency per hop (large messages; kept for the
    P2P NCCL transport's per-layer sends, not for small-message all-reduce)."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    return 2.0 * (n - 1) / n * nbytes / bus_bw + 2.0 * (n - 1) * latency_s


def expected_distinct(draws: float, k: int, pool: int) -> float:
    """Expected number of distinct items of ``pool`` touched when ``draws`` groups each pick
    ``k`` distinct items uniformly: pool x (1 - (1 - k/pool)^draws)."""
    if pool <= 0 or draws <= 0:
        return 0.0
    return pool * (1.0 - (1.0 - min(k, pool) / pool) ** draws)


def node_hits(world: int, gpus_per_node: int, top_k: int, max_nodes_per_token: int = 4) -> float:
    """Expected distinct nodes one token's top_k experts live on (at most
    ``max_nodes_per_token``: DeepSeek-V3's node-limited routing, 4)."""
    nodes = max(1, world // gpus_per_node)
    return min(nodes * (1.0 - (1.0 - 1.0 / nodes) ** top_k), max_nodes_per_token)


def deepep_legs(tokens_per_rank: float, hidden: int, top_k: int, world: int, gpus_per_node: int,
                elem_bytes: float, dedup_nodes: bool, max_nodes_per_token: int = 4) -> tuple[float, float]:
    """(NVLink bytes, RDMA bytes) one rank sends in one dispatch (or receives in a combine).

    Each token picks ``top_k`` experts spread uniformly over ``world`` ranks.
    - low-latency kernels (``dedup_nodes`` False) send one copy per expert: the copies for
      other ranks of the same node go over NVLink, the others over RDMA;
    - normal kernels inside one node send a token once per other destination rank over NVLink;
      across nodes once per other destination node over RDMA (``node_hits`` less the own
      node's share) to the rank of the same local index there, which forwards it over NVLink
      to the other destination ranks of its node (DeepEP internode.cu: RDMA senders, NVL
      forwarders, NVL receivers). By symmetry a rank forwards, per dispatch, as many copies as
      its own tokens need over all destination nodes: world x P(a rank is hit) x
      (gpn - 1)/gpn per token. That NVLink leg is the bottleneck at EP16 (two nodes: little
      RDMA, nearly every destination rank reached by forwarding); link bytes only (see the
      module docstring).
    """
    nodes = max(1, world // gpus_per_node)
    tok_bytes = tokens_per_rank * hidden * elem_bytes
    if not dedup_nodes:
        if nodes == 1:
            return tok_bytes * top_k * (world - 1) / world, 0.0
        local_share = gpus_per_node / world
        return (tok_bytes * top_k * local_share * (gpus_per_node - 1) / gpus_per_node,
                tok_bytes * top_k * (1 - local_share))
    # normal kernels: other ranks of the node over NVLink, other nodes over RDMA (one copy each)
    rank_hit = 1.0 - (1.0 - 1.0 / world) ** top_k
    if nodes == 1:
        return tok_bytes * (world - 1) * rank_hit, 0.0
    remote_nodes = node_hits(world, gpus_per_node, top_k, max_nodes_per_token) * (nodes - 1) / nodes
    forwarded = world * rank_hit * (gpus_per_node - 1) / gpus_per_node
    return tok_bytes * forwarded, tok_bytes * remote_nodes


def deepep_reported_bytes(tokens_per_rank: float, hidden: int, top_k: int, world: int, gpus_per_node: int,
                          elem_bytes: float, max_nodes_per_token: int = 4) -> tuple[float, float]:
    """(NVLink bytes, RDMA bytes) of one normal-kernel dispatch as DeepEP's benchmarks count
    them when they report GB/s: every destination rank (own rows included) and every
    destination node (own node included); the normal-kernel legs of ``deepep_legs``."""
    tok_bytes = tokens_per_rank * hidden * elem_bytes
    nodes = max(1, world // gpus_per_node)
    ranks = world * (1.0 - (1.0 - 1.0 / world) ** top_k)
    if nodes == 1:
        return tok_bytes * ranks, 0.0
    return tok_bytes * ranks, tok_bytes * node_hits(world, gpus_per_node, top_k, max_nodes_per_token)


def moe_imbalance(assignments_per_rank: float, ranks: int) -> float:
    """Max/mean load over ``ranks`` when assignments scatter uniformly at random (the normal
    tail of the maximum): 1 + sqrt(2 ln ranks / mean). moe_load.py adds skew and EPLB."""
    if ranks <= 1 or assignments_per_rank <= 0:
        return 1.0
    return 1.0 + math.sqrt(2.0 * math.log(ranks) / max(assignments_per_rank, 1.0))
