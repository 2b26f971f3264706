"""DeepEP all-to-all prices with fitted constants (seconds).

Both kernels move each rank's tokens to the ranks holding their top-k experts, one leg over
NVLink (inside the node) and one over RDMA (to other nodes); bytes per leg come from
``comm.deepep_legs`` (FP8 dispatch = 1 byte/element, BF16 combine = 2).

- low latency (decode; one copy per expert, no node de-duplication, legs overlap poorly):
      t = base + nvl_bytes / nvl_bw + rdma_bytes / rdma_bw
- normal (prefill; node de-duplicated, NVLink forwarding overlaps RDMA):
      t = base + max(nvl_bytes / nvl_bw, rdma_bytes / rdma_bw)

Constants per hardware profile (``calibration.deepep_ll_dispatch`` etc.), fitted by
``pdsim calibrate fit`` to calibration/data/deepep_low_latency.csv and deepep_normal.csv.
"""
from __future__ import annotations

from .comm import deepep_legs


def ll_time_s(params: dict, tokens_per_rank: float, hidden: int, top_k: int, ep: int, gpn: int, elem_bytes: float) -> float:
    nvl, rdma = deepep_legs(tokens_per_rank, hidden, top_k, ep, gpn, elem_bytes, dedup_nodes=False)
    return params["base_us"] * 1e-6 + nvl / (params["nvl_gbps"] * 1e9) + rdma / (params["rdma_gbps"] * 1e9)


def normal_time_s(params: dict, tokens_per_rank: float, hidden: int, top_k: int, ep: int, gpn: int, elem_bytes: float) -> float:
    nvl, rdma = deepep_legs(tokens_per_rank, hidden, top_k, ep, gpn, elem_bytes, dedup_nodes=True)
    return params["base_us"] * 1e-6 + max(nvl / (params["nvl_gbps"] * 1e9), rdma / (params["rdma_gbps"] * 1e9))
