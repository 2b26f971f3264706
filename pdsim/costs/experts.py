"""Prices of expert-as-a-service (sim/experts.py): the MoE layers of attention clients served by
stateless expert servers. Seconds, bytes, bytes/s.

Per MoE layer of a client's step:
- the round trip: each of the client rank's tokens goes (FP8 activations, ``hidden`` bytes) to
  the distinct servers holding its ``top_k`` experts — ``S (1 - (1 - 1/S)^k)`` of ``S`` servers
  in expectation — and comes back (BF16, 2 ``hidden`` bytes), over the rank's NIC share, plus a
  one-sided write and a poll per direction (``p2p_latency``);
- the servers' grouped GEMM: every server runs one grouped GEMM over what all clients wrote —
  the same kernel form as an expert-parallel group of the live servers (costs/step.py's MoE
  part, on the server hardware's constants), at the aggregate tokens of all clients.
With two-batch overlap a client's other micro-batch computes its attention meanwhile, so only
what exceeds the attention of one layer shows.
"""
from __future__ import annotations


def fan_out(top_k: int, servers: int) -> float:
    """Expected distinct servers a token's top_k experts sit on (uniform placement)."""
    if servers <= 1:
        return 1.0
    return servers * (1.0 - (1.0 - 1.0 / servers) ** top_k)


def round_trip_s(tokens: float, hidden: int, top_k: int, servers: int, nic_bps: float, latency_s: float) -> float:
    """Seconds for ``tokens`` of one client rank to reach their experts' servers and come back."""
    if tokens <= 0:
        return 0.0
    f = fan_out(top_k, servers)
    return 2.0 * latency_s + tokens * hidden * 3.0 * f / nic_bps
