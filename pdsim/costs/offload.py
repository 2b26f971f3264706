"""Offload-tier and host-memory I/O prices (pure functions; seconds, bytes, bytes/s).

A storage device (host DRAM over PCIe, local NVMe, remote NVMe-oF; figures in
hardware_profiles/storage.yaml with sources) serves one I/O at a time, FIFO: an I/O of
``nbytes`` that starts at ``start_s`` ends at ``start_s + latency + nbytes / bandwidth``.
Without GPUDirect Storage every byte read from a tier lands in host memory and crosses the
GPU's PCIe link, so a load also takes at least ``nbytes / pcie_bps`` (the PCIe floor). A KV
block read from vLLM's host tensor pool (P2P NCCL receive buffer spilled to host) costs the
same PCIe crossing.
"""
from __future__ import annotations


def device_io_end_s(start_s: float, nbytes: float, bytes_per_s: float, latency_s: float) -> float:
    """When an I/O started at ``start_s`` on a FIFO device ends (seconds)."""
    return start_s + latency_s + nbytes / bytes_per_s


def pcie_floor_s(nbytes: float, pcie_bps: float) -> float:
    """Seconds to move ``nbytes`` over the GPU's PCIe link(s) at ``pcie_bps`` bytes/s."""
    return nbytes / pcie_bps


def tier_link_scale(kind: str, pcie_links: int, nodes: float) -> float:
    """How many copies of a device's per-unit bandwidth an instance sees: host DRAM is read
    over each GPU's PCIe link that carries KV (``pcie_links``); a local SSD figure is per node."""
    return pcie_links if kind == "host_dram" else nodes
