"""D-side receive buffers of vLLM's P2P NCCL connector: a GPU buffer of ``kv_buffer_size``
bytes, then a host tensor memory pool over PCIe, else the KV is lost (D recomputes).

Accounting (bytes): written = read + resident + evicted + cancelled, where ``read`` is KV
handed to the decode KV pool at admission, ``evicted`` is KV dropped for lack of room (lost)
and ``cancelled`` KV of requests given up while it waited (a failure elsewhere).
"""
from __future__ import annotations

from ...costs.offload import pcie_floor_s


class ReceiveBuffer:
    def __init__(self, gpu_bytes: float, host_bytes: float, pcie_bps: float):
        self.capacity = {"gpu": gpu_bytes, "host": host_bytes}
        self.used = {"gpu": 0.0, "host": 0.0}
        self.pcie_bps = pcie_bps
        self.written = {"gpu": 0.0, "host": 0.0}
        self.read = {"gpu": 0.0, "host": 0.0}
        self.evicted = 0.0  # bytes lost (no room anywhere)
        self.cancelled = 0.0  # bytes of requests given up while their KV waited here
        self.lost_requests = 0

    def reserve(self, nbytes: float) -> str | None:
        """Place an incoming request's KV: 'gpu', 'host', or None (lost)."""
        for where in ("gpu", "host"):
            if self.used[where] + nbytes <= self.capacity[where]:
                self.used[where] += nbytes
                self.written[where] += nbytes
                return where
        self.evicted += nbytes
        self.lost_requests += 1
        return None

    def take(self, nbytes: float, where: str) -> float:
        """Hand KV to the decode pool; returns the PCIe read time (0 from the GPU buffer)."""
        self.used[where] -= nbytes
        self.read[where] += nbytes
        return pcie_floor_s(nbytes, self.pcie_bps) if where == "host" else 0.0

    def d_tail_tokens(self, req) -> int:
        """Prompt tokens D computes itself: none, P sampled the first token (FileStore's differs)."""
        return 0

    def d_tail_s(self, req) -> float:
        """D's own compute before the first token: none, P sampled it (seconds; FileStore's differs)."""
        return 0.0

    def cancel(self, nbytes: float, where: str) -> None:
        """Give back a waiting request's reservation (the request failed elsewhere)."""
        self.used[where] -= nbytes
        self.cancelled += nbytes

    def stats(self) -> dict:
        return {"gpu_capacity_bytes": self.capacity["gpu"], "host_capacity_bytes": self.capacity["host"],
                "written_bytes": sum(self.written.values()), "read_bytes": sum(self.read.values()),
                "resident_bytes": sum(self.used.values()), "lost_bytes": self.evicted,
                "host_written_bytes": self.written["host"], "lost_requests": self.lost_requests}
