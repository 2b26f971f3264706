"""DeepEP all-to-all prices with fitted constants (seconds).

Both kernels move each rank's tokens to the ranks holding their top-k experts, one leg over
NVLink (inside the node) and one over RDMA (to other nodes); bytes per leg come from
``comm.deepep_legs`` (FP8 dispatch = 1 byte per hidden element plus one FP32 scale per 128,
BF16 combine = 2).

- low latency (decode; one copy per expert, no node de-duplication):
      t = base + pair_us x remote_pairs + max(nvl_bytes / nvl_bw, rdma_bytes / rdma_bw)
  The two legs overlap (DeepEP legacy ``internode_ll.cu``, ``dispatch``: warp ``w`` of a token
  sends its ``w``-th top-k copy, either a warp copy over NVLink by the SM
  (``UNROLLED_WARP_COPY``) or a non-blocking IBGDA put (``nvshmemi_ibgda_put_nbi_warp``) that the
  NIC carries while the SMs go on copying; ``combine`` likewise TMA-stores NVLink pairs and
  posts puts for the others), so the slower leg bounds the kernel. On H100's rows this form
  predicts a left-out EP size to 2.5% / 4.9% (dispatch / combine), adding the legs to 5.3% /
  5.8%.
  The fixed cost grows with the EP size across nodes. Read in DeepEP's legacy
  ``csrc/kernels/legacy/internode_ll.cu`` (``dispatch`` / ``combine``): the launch configures
  one warp group per (local expert, rank) pair (``responsible_expert_idx`` over ``num_experts``,
  ``src_rank`` / ``dst_rank = idx / num_local_experts``). Per pair the sender posts one
  message besides the tokens, after that pair's tokens (dispatch: the token count,
  ``nvshmemi_ibgda_amo_nonfetch_add`` into ``rdma_recv_count``; combine: the finish flag into
  ``rdma_recv_flag``), and the receiver spins on that word (``ld_acquire_sys_global`` in the
  receive phase; the combine then waits for all of them, ``cg::this_grid().sync()``) before
  it copies. A pair inside the node is an NVLink store (``st_release_sys_global``); a pair
  whose other end is on another node is an IBGDA atomic through the NIC and a poll of a word
  written over PCIe by the NIC. Per receiving rank there are
      remote_pairs = local experts x remote ranks = experts / ep x (ep - gpn)
  of them (0 in one node; 128 / 192 / 224 of 256 experts at EP16 / 32 / 64: the count
  saturates at ``experts``, as the DeepEP README's H800 table does). Unlike the token puts
  these are one small message each, so they add a cost per pair, not per byte: the data cannot
  tell the NIC's atomic rate from the wait for the last of more sources, so ``pair_us`` is one
  fitted constant (AIConfigurator's H100 rows at EP16/32/64 and several token counts pin it;
  ~0.06 us per pair for dispatch and combine alike). ``base`` is then the intranode floor
  (launch, the grid sync, the NVLink pairs: H100 ~13 us, its measured one-token EP8 time).
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

Units: ``base_us`` and ``pair_us`` microseconds (``pair_us`` per remote pair), ``nvl_gbps`` / ``rdma_gbps`` 1e9 bytes/s per GPU.
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


def remote_pairs(experts: float, ep: int, gpn: int) -> float:
    """(local expert, rank) pairs of one rank whose other end is on another node: its
    ``experts / ep`` local experts times the ``ep - gpn`` ranks of other nodes (0 in one node).
    ``experts`` is the physical expert count the kernel runs with (redundant experts included)."""
    if ep <= gpn or ep <= 0:
        return 0.0
    return float(experts) / ep * (ep - gpn)


def ll_fixed_s(params: dict, experts: float, ep: int, gpn: int) -> float:
    """Fixed seconds of one low-latency kernel: ``base_us`` + ``pair_us`` x remote pairs."""
    return (float(params["base_us"]) + float(params.get("pair_us", 0.0)) * remote_pairs(experts, ep, gpn)) * 1e-6


def ll_time_s(params: dict, tokens_per_rank: float, hidden: int, top_k: int, ep: int, gpn: int, elem_bytes: float,
              experts: float) -> float:
    nvl, rdma = deepep_legs(tokens_per_rank, hidden, top_k, ep, gpn, elem_bytes, dedup_nodes=False)
    nvl_s = nvl / (float(params["nvl_gbps"]) * 1e9)
    rdma_s = rdma / (float(params["rdma_gbps"]) * 1e9) if rdma > 0 else 0.0
    return ll_fixed_s(params, experts, ep, gpn) + (nvl_s if nvl_s > rdma_s else rdma_s)


def normal_time_s(params: dict, tokens_per_rank: float, hidden: int, top_k: int, ep: int, gpn: int, elem_bytes: float) -> float:
    nvl, rdma = deepep_legs(tokens_per_rank, hidden, top_k, ep, gpn, elem_bytes, dedup_nodes=True)
    leg = nvl / (float(params["nvl_gbps"]) * 1e9)
    if rdma > 0:
        leg = max(leg, rdma / (float(params["rdma_gbps"]) * 1e9))
    return float(params["base_us"]) * 1e-6 + leg


def linear_coeffs(params: dict, low_latency: bool, hidden: int, top_k: int, ep: int, gpn: int,
                  elem_bytes: float, experts: float, rdma_scale: float = 1.0) -> tuple[float, float, float]:
    """(fixed seconds, SM-driven seconds per token per rank, in-flight seconds per token per rank)
    of one kernel; their sum is the kernel's time. ``rdma_scale`` scales the fitted RDMA
    bandwidth for what-if NICs (line-rate ratio); ``experts``: physical experts (the
    low-latency kernels' per-pair cost, ``ll_fixed_s``).

    The split says which part of a kernel two-batch overlap can hide (step.py): low-latency
    kernels copy the NVLink leg with their own SMs (loads and stores by the sending warps), while
    the RDMA leg and the base latency are in flight on the NIC (IBGDA puts; DeepEP README: the
    hook-based receive "does not occupy any SM resource"); the legs overlap, so the in-flight
    part per token is what the RDMA leg takes beyond the SMs' copy, max(rdma - nvl, 0). Normal kernels run on their own
    fixed SM partition (``deepep_normal_sm_share``), so all of their time is comm-stream time."""
    nvl, rdma = deepep_legs(1.0, hidden, top_k, ep, gpn, elem_bytes, dedup_nodes=not low_latency)
    a = nvl / (float(params["nvl_gbps"]) * 1e9)
    b = rdma / (float(params["rdma_gbps"]) * 1e9 * rdma_scale) if rdma > 0 else 0.0
    if low_latency:
        return ll_fixed_s(params, experts, ep, gpn), a, (b - a if b > a else 0.0)
    return float(params["base_us"]) * 1e-6, 0.0, (max(a, b) if rdma > 0 else a)
