"""KV-cache transfer prices: bytes moved, fixed overheads and per-flow bandwidth caps.

time(request) = fixed_s + bytes / rate, where the fabric shares link capacity among concurrent
flows (sim/network.py) and caps each flow at ``senders x NIC share per GPU x nic efficiency``.

- bytes = tokens x KV bytes/token x copies. MLA latents are identical on every attention-TP
  rank, so one copy moves (one sender). GQA heads are sharded over attention TP and repeated
  once TP exceeds the KV-head count (DOMAIN.md s4: Qwen3-235B at TP8 moves 2x); every rank
  sends its shard in parallel.
- Mooncake transfer engine, batched (Mooncake PR #499 / SGLang PR #7236): one setup per
  request, ``setup_ms`` (DOMAIN.md s4: a ~ 0.5-2 ms in the 1P1D measurements).
- Mooncake per-page path: one submission per (page, layer), serialised: ``per_page_us`` each.
  Default 68 us = 650 ms / (157 pages x 61 layers), the DeepSeek-V3 10K-context, page-64
  measurement in DOMAIN.md s4.
- P2P NCCL: one send per layer, each paying the point-to-point latency.

Calibrated (``hw.calibration['mooncake']``, fitted to calibration/data/mooncake_transfer.csv):
the transfer engine stripes one request over every NIC of the sending node, so the flow cap
is ``nodes x NICs x line rate x eff`` with ``eff`` and ``setup_ms`` fitted to the 1P1D
measurements (time = setup + bytes / BW_eff, BW_eff = eff x NICs x line rate: single batched
transfers at concurrency 1; H800 and H20 measured, others derived), and ``per_page_us`` from
the per-page vs batched DeepSeek-V3 pair. Units: ``setup_ms`` milliseconds, ``per_page_us``
microseconds, ``eff`` a fraction of line rate; functions return bytes, seconds, bytes/s.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..specs.hardware import HardwareProfile
from ..specs.memory import kv_dtype
from ..specs.model import ModelSpec
from ..specs.scenario import TransferSpec

MOONCAKE_SETUP_MS = 1.0
MOONCAKE_PER_PAGE_US = 68.0


@dataclass(frozen=True)
class TransferPlan:
    nbytes: float  # bytes on the wire
    fixed_s: float  # overheads not overlapped with the bytes
    senders: int  # GPUs (NIC shares) sending in parallel


def kv_bytes_moved(model: ModelSpec, tokens: int, attn_tp: int, engine_kv_dtype: str = "auto") -> tuple[float, int]:
    """(bytes, senders) for ``tokens`` of KV leaving an instance with attention TP ``attn_tp``."""
    per_tok = model.kv_bytes_per_token(kv_dtype(model, engine_kv_dtype))
    if model.attention == "mla":
        return float(tokens * per_tok), 1
    return float(tokens * per_tok * model.kv_replication(attn_tp)), attn_tp


def transfer_plan(model: ModelSpec, hw: HardwareProfile, spec: TransferSpec, tokens: int, attn_tp: int,
                  page_size: int, engine_kv_dtype: str = "auto", calibrated: bool = False) -> TransferPlan:
    nbytes, senders = kv_bytes_moved(model, tokens, attn_tp, engine_kv_dtype)
    cal = hw.calibration.get("mooncake") if calibrated else None
    if spec.backend == "mooncake":
        default_setup = float(cal["setup_ms"]) if cal else MOONCAKE_SETUP_MS
        default_page = float(cal["per_page_us"]) if cal and "per_page_us" in cal else MOONCAKE_PER_PAGE_US
        setup = (spec.setup_ms if spec.setup_ms is not None else default_setup) * 1e-3
        if spec.batched:
            fixed = setup
        else:
            per = (spec.per_page_us if spec.per_page_us is not None else default_page) * 1e-6
            pages = -(-tokens // page_size)
            fixed = setup + pages * model.num_layers * per
    else:
        setup = (spec.setup_ms or 0.0) * 1e-3
        fixed = setup + model.num_layers * hw.efficiency.p2p_latency_us * 1e-6
    return TransferPlan(nbytes, fixed, senders)


def flow_cap(hw: HardwareProfile, senders: int, gpus: int, nic_gbit: float | None = None,
             backend: str = "nccl", calibrated: bool = False) -> float:
    """Max bytes/s of one request's transfer: its senders' NIC shares at RDMA efficiency, or
    (calibrated Mooncake) the sending nodes' NICs striped at the fitted efficiency."""
    nic = nic_gbit * 1e9 / 8 if nic_gbit else hw.node.nic_bytes_per_s
    cal = hw.calibration.get("mooncake") if calibrated else None
    if backend == "mooncake" and cal:
        nodes = max(1, -(-min(senders, gpus) // hw.gpus_per_node))
        return nodes * hw.node.nics_per_node * nic * float(cal["eff"])
    per_gpu = nic * hw.node.nics_per_node / hw.gpus_per_node
    return min(senders, gpus) * per_gpu * hw.efficiency.nic


def instance_nic_capacity(hw: HardwareProfile, gpus: int, nic_gbit: float | None = None) -> float:
    """Bytes/s an instance's NICs move in one direction, at RDMA efficiency."""
    return flow_cap(hw, gpus, gpus, nic_gbit)
