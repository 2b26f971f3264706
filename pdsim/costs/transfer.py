"""KV-cache transfer prices: bytes moved, work requests (chunks), fixed overheads and per-flow caps.

time(request) = setup + queued work-request posting (serial_s) + bytes / rate, where the fabric
shares link capacity among concurrent flows (sim/net/fabric.py) and caps each flow at ``flow_cap``.

- bytes = tokens x KV bytes/token x copies. MLA latents are identical on every attention-TP
  rank, so one copy moves (one sender). GQA heads are sharded over attention TP and repeated
  once TP exceeds the KV-head count (DOMAIN.md s4: Qwen3-235B at TP8 moves 2x); every rank
  sends its shard in parallel.
- chunks: the KV pool is laid out per layer (and per K/V buffer for non-MLA models), so a
  request's KV is one contiguous region per (run of pages, layer[, K/V]): Mooncake and NIXL
  post one RDMA work request per such chunk (SGLang mooncake/conn.py groups runs of pages
  contiguous on both P and D). The world counts ``runs`` from both ends' page allocators
  (sim/kv/pool.py: a fresh pool gives one run, a full churned one single pages); without
  them ``run_pages`` pages per run (1 = every page its own run, the worst case). A sender
  posts ``chunks`` = runs x layers x kv_parts x (destination ranks per source rank, when D's
  attention TP is larger). Fully fragmented at page_size 1, a DeepSeek-V3 4K-token prompt is
  4096 x 61 = 249,856 chunks against 64 x 61 = 3,904 at page 64: the transfer-bound behaviour
  SGLang users report with small pages on busy servers (Mooncake issue #522, #826).
- Mooncake transfer engine, batched (Mooncake PR #499 / SGLang PR #7236): one setup per
  request (in parallel with other requests) plus ``per_chunk_us`` per chunk, ``serial_s`` =
  chunks x per_chunk, which the sender's work-request queue serialises across concurrent
  transfers (sim/transports/base.py). Fitted jointly (fit_comm.fit_mooncake): setup, per-chunk
  cost and NIC efficiency on the 1P1D transfers of calibration/data/mooncake_transfer.csv and
  the many-chunk transfer of calibration/data/kv_transfer_chunks.csv (DeepSeek-V3 10K, SGLang
  PR #7236). docs/mechanisms/kv-transfer.md explains the mechanism.
- Mooncake per-page path (``batched: false``): one synchronous transfer per chunk, each a full
  round trip: ``per_page_us`` per chunk (the 650 ms vs 60 ms pair of SGLang PR #7236).
- P2P NCCL: one send per layer, each paying the point-to-point latency.
- Same-node P->D (``link="nvlink"``): copies over NVLink (Mooncake's NVLink transport, CUDA
  IPC): per sender the GPU's per-direction NVLink bandwidth at the NVLink efficiency, a setup of
  ``NVLINK_SETUP_MS`` and ``NVLINK_PER_CHUNK_US`` per copy (one cudaMemcpyAsync per chunk;
  both assumptions). GPUs without NVLink copy over PCIe peers.
- Heterogeneous P and D (``dst_hw``, ``dst_attn_tp``): the flow is capped by the slower end's
  NIC share; a GQA P rank whose heads land on several D ranks splits every chunk.

Units: ``setup_ms`` milliseconds, ``per_chunk_us`` / ``per_page_us`` microseconds, ``eff`` a
fraction of line rate; functions return bytes, seconds, bytes/s.
"""
from __future__ import annotations

import math
from typing import NamedTuple

from ..specs.hardware import HardwareProfile
from ..specs.memory import kv_dtype
from ..specs.model import ModelSpec
from ..specs.scenario import TransferSpec

MOONCAKE_SETUP_MS = 1.0  # prior: DOMAIN.md s4, a ~ 0.5-2 ms in the 1P1D measurements
MOONCAKE_PER_PAGE_US = 68.0  # prior: 650 ms / (157 x 61) sync submissions (SGLang PR #7236)
MOONCAKE_PER_CHUNK_US = 4.3  # prior: (60 ms - bandwidth time) / 9,577 chunks (SGLang PR #7236)
NVLINK_SETUP_MS = 0.1  # assumption: IPC handles are opened once per pair; a transfer's sync + metadata
NVLINK_PER_CHUNK_US = 2.0  # assumption: one cudaMemcpyAsync issue per chunk (~2 us launch)


class TransferPlan(NamedTuple):
    """One transfer's price (a named tuple: the simulator makes one per request, and a frozen
    dataclass's ``__init__`` cost more than the rest of the pricing)."""

    nbytes: float  # bytes on the wire
    fixed_s: float  # overheads not overlapped with the bytes, on an idle sender (setup + serial_s)
    senders: int  # GPUs (NIC shares) sending in parallel
    chunks: int = 0  # work requests each sender posts
    link: str = "rdma"
    serial_s: float = 0.0  # the part of fixed_s the sender's work-request queue serialises (chunks x per-chunk)


def kv_bytes_moved(model: ModelSpec, tokens: int, attn_tp: int, engine_kv_dtype: str = "auto") -> tuple[float, int]:
    """(bytes, senders) for ``tokens`` of KV leaving an instance with attention TP ``attn_tp``."""
    per_tok, copies, senders = _kv_copies(model, attn_tp, engine_kv_dtype)
    return float(tokens * per_tok * copies), senders


def _kv_copies(model: ModelSpec, attn_tp: int, engine_kv_dtype: str) -> tuple[int, int, int]:
    """(KV bytes per token, copies moved, senders): MLA moves one copy from one sender, GQA its
    replication from every attention-TP rank (module docstring)."""
    per_tok = model.kv_bytes_per_token(kv_dtype(model, engine_kv_dtype))
    if model.attention == "mla":
        return per_tok, 1, 1
    return per_tok, model.kv_replication(attn_tp), attn_tp


def kv_chunks(model: ModelSpec, tokens: int, page_size: int, attn_tp: int = 1, dst_attn_tp: int | None = None,
              run_pages: float = 1.0, runs: int | None = None) -> int:
    """Work requests one sender posts for ``tokens`` of KV: contiguous (page, layer[, K/V])
    regions, ``run_pages`` pages per contiguous run (or ``runs`` contiguous runs, counted by the
    page allocators of both ends: sim/kv/pool.py); a GQA source rank whose heads land on
    several destination ranks (D's attention TP larger) sends each chunk as that many pieces."""
    return _chunks(tokens, page_size, run_pages, runs, _chunks_per_run(model, attn_tp, dst_attn_tp))


def _chunks_per_run(model: ModelSpec, attn_tp: int, dst_attn_tp: int | None) -> int:
    """Work requests per contiguous run of pages: layers x KV parts x pieces per chunk."""
    parts = 1 if model.attention == "mla" else 2
    split = 1
    if model.attention != "mla" and dst_attn_tp and dst_attn_tp > attn_tp:
        split = min(dst_attn_tp, max(model.num_kv_heads, attn_tp)) // attn_tp or 1
    return model.num_layers * parts * split


def _chunks(tokens: int, page_size: int, run_pages: float, runs: int | None, per_run: int) -> int:
    if tokens <= 0:
        return 0
    pages = -(-tokens // page_size)
    if runs is not None:
        runs = min(max(int(runs), 1), pages)
    else:
        runs = math.ceil(pages / max(run_pages, 1.0))
    return int(runs * per_run)


def mooncake_constants(hw: HardwareProfile, calibrated: bool) -> dict:
    """setup_ms, per_chunk_us, per_page_us, eff of the Mooncake transfer engine on ``hw``."""
    cal = hw.calibration.get("mooncake") if calibrated else None
    cal = cal or {}
    return {"setup_ms": float(cal.get("setup_ms", MOONCAKE_SETUP_MS)),
            "per_chunk_us": float(cal.get("per_chunk_us", MOONCAKE_PER_CHUNK_US)),
            "per_page_us": float(cal.get("per_page_us", MOONCAKE_PER_PAGE_US)),
            "eff": float(cal["eff"]) if "eff" in cal else None}


def transfer_plan(model: ModelSpec, hw: HardwareProfile, spec: TransferSpec, tokens: int, attn_tp: int,
                  page_size: int, engine_kv_dtype: str = "auto", calibrated: bool = False, *,
                  link: str = "rdma", dst_attn_tp: int | None = None, run_pages: float = 1.0,
                  runs: int | None = None) -> TransferPlan:
    """Bytes, senders, chunks and fixed seconds of moving ``tokens`` of KV from a P instance
    (attention TP ``attn_tp``, ``page_size``) over ``link`` ('rdma' or 'nvlink'). ``runs``:
    contiguous page runs of this request (both ends' allocators); without it ``run_pages``
    pages per run (1: every page its own run, the worst case)."""
    return TransferPricer(model, hw, spec, attn_tp, page_size, engine_kv_dtype, calibrated, link=link,
                          dst_attn_tp=dst_attn_tp).plan(tokens, run_pages, runs)


class TransferPricer:
    """``transfer_plan`` for one sender, receiver, link and transfer spec: what does not depend
    on the request (bytes per token, work requests per run of pages, setup and per-chunk
    seconds) worked out once, so a request's ``plan`` is a few operations (the simulator prices
    every P->D transfer with it: sim/build.py ``PairPlan``)."""

    __slots__ = ("per_tok", "copies", "senders", "page", "per_run", "link", "setup_s", "per_chunk_us",
                 "per_chunk_s", "fixed_s")

    def __init__(self, model: ModelSpec, hw: HardwareProfile, spec: TransferSpec, attn_tp: int, page_size: int,
                 engine_kv_dtype: str = "auto", calibrated: bool = False, *, link: str = "rdma",
                 dst_attn_tp: int | None = None):
        self.per_tok, self.copies, self.senders = _kv_copies(model, attn_tp, engine_kv_dtype)
        self.page = page_size
        self.per_run = _chunks_per_run(model, attn_tp, dst_attn_tp)
        self.link = link
        self.per_chunk_us = self.per_chunk_s = self.fixed_s = None  # which one prices the chunks
        self.setup_s = 0.0
        if link == "nvlink":
            self.setup_s = (spec.setup_ms if spec.setup_ms is not None else NVLINK_SETUP_MS) * 1e-3
            self.per_chunk_us = NVLINK_PER_CHUNK_US
        elif spec.backend == "mooncake":
            c = mooncake_constants(hw, calibrated)
            self.setup_s = (spec.setup_ms if spec.setup_ms is not None else c["setup_ms"]) * 1e-3
            if spec.batched:
                self.per_chunk_us = c["per_chunk_us"]
            else:
                self.per_chunk_s = (spec.per_page_us if spec.per_page_us is not None else c["per_page_us"]) * 1e-6
        else:
            # NCCL point to point: one send per layer, a latency chain of this request alone
            setup = (spec.setup_ms or 0.0) * 1e-3
            self.fixed_s = setup + model.num_layers * hw.efficiency.p2p_latency_us * 1e-6

    def plan(self, tokens: int, run_pages: float = 1.0, runs: int | None = None) -> TransferPlan:
        """The plan of ``tokens`` of KV in ``runs`` contiguous page runs (see ``transfer_plan``)."""
        nbytes = float(tokens * self.per_tok * self.copies)
        chunks = _chunks(tokens, self.page, run_pages, runs, self.per_run)
        if self.per_chunk_us is not None:
            serial = chunks * self.per_chunk_us * 1e-6
        elif self.per_chunk_s is not None:
            serial = chunks * self.per_chunk_s
        else:
            return TransferPlan(nbytes, self.fixed_s, self.senders, chunks, self.link)
        return TransferPlan(nbytes, self.setup_s + serial, self.senders, chunks, self.link, serial)


def _nic_cap(hw: HardwareProfile, senders: int, gpus: int, nic_gbit: float | None, backend: str, calibrated: bool) -> float:
    nic = nic_gbit * 1e9 / 8 if nic_gbit else hw.node.nic_bytes_per_s
    eff = mooncake_constants(hw, calibrated)["eff"] if (backend == "mooncake" and calibrated) else None
    # each sending GPU's transfer engine uses the NICs its buffers are close to (Mooncake's
    # topology-aware NIC choice: the GPU's own PCIe-affine NIC share), the same assumption the
    # fit makes (fit_comm.fit_mooncake: line rate = senders x their NIC share)
    per_gpu = nic * hw.node.nics_per_node / hw.gpus_per_node
    return min(senders, gpus) * per_gpu * (eff if eff is not None else hw.efficiency.nic)


def flow_cap(hw: HardwareProfile, senders: int, gpus: int, nic_gbit: float | None = None,
             backend: str = "nccl", calibrated: bool = False, *, link: str = "rdma",
             dst_hw: HardwareProfile | None = None, dst_gpus: int | None = None) -> float:
    """Max bytes/s of one request's transfer. RDMA: its senders' NIC shares (the NICs on each
    sending GPU's PCIe switch: Mooncake's topology matrix lists them as the GPU's preferred
    NICs and slices a request over those) at RDMA efficiency, or (calibrated Mooncake) at the
    fitted efficiency, capped by the receiving side's NICs when D runs on other hardware
    (``dst_hw``). NVLink: the senders' per-direction NVLink (or PCIe peer) bandwidth at the
    NVLink efficiency."""
    if link == "nvlink":
        return min(senders, gpus) * hw.gpu.peer_bytes_per_s * hw.efficiency.nvlink
    cap = _nic_cap(hw, senders, gpus, nic_gbit, backend, calibrated)
    if dst_hw is not None:
        cap = min(cap, _nic_cap(dst_hw, senders, dst_gpus or gpus, nic_gbit, backend, calibrated))
    return cap


def instance_nic_capacity(hw: HardwareProfile, gpus: int, nic_gbit: float | None = None, backend: str = "nccl",
                          calibrated: bool = False) -> float:
    """Bytes/s an instance's NICs move in one direction, at RDMA efficiency, or at the calibrated
    transfer engine's measured efficiency where that is higher (the link carried it)."""
    return max(flow_cap(hw, gpus, gpus, nic_gbit), flow_cap(hw, gpus, gpus, nic_gbit, backend, calibrated))


def same_node(p_gpus: int, d_gpus: int, gpus_per_node: int) -> bool:
    """Whether a P and a D instance can share a node (both fit in one together): the world
    places them and passes ``link='nvlink'`` when it put them on the same node."""
    return p_gpus + d_gpus <= gpus_per_node
