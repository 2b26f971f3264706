"""Offload tiers below HBM (host DRAM, local SSD, remote storage), LMCache-style.

A tier holds KV blocks keyed by prefix hash, up to its capacity in bytes, and is a FIFO
device: every read or write occupies it for latency + bytes / bandwidth after whatever is
already queued, so background writes (spills) delay later reads. That is how a host DRAM tier
that overflows into a local SSD turns into disk thrashing.

Accounting per tier (bytes): written = resident + evicted; ``read`` counts bytes loaded back.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Hashable

from ...costs.offload import device_io_end_s, pcie_floor_s
from ...plugins import Plugin, Registry
from ...specs.storage import StorageDevice


class EvictionPolicy(Plugin):
    """Orders a tier's blocks; ``victim`` names the next block to evict."""

    def on_insert(self, blocks: OrderedDict, key: Hashable) -> None:
        pass

    def on_access(self, blocks: OrderedDict, key: Hashable) -> None:
        pass

    def victim(self, blocks: OrderedDict) -> Hashable:
        return next(iter(blocks))


EVICTION: Registry[EvictionPolicy] = Registry("eviction policy", EvictionPolicy)


@EVICTION.register("lru")
class LRU(EvictionPolicy):
    def on_access(self, blocks, key):
        blocks.move_to_end(key)


@EVICTION.register("fifo")
class FIFO(EvictionPolicy):
    pass


class Tier:
    def __init__(self, name: str, device: StorageDevice, capacity_bytes: float, policy: EvictionPolicy):
        self.name = name
        self.device = device
        self.capacity = capacity_bytes
        self.read_bps = device.read_gbps * 1e9
        self.write_bps = device.write_gbps * 1e9
        self.latency = device.latency_us * 1e-6
        self.policy = policy
        self.blocks: OrderedDict[Hashable, float] = OrderedDict()
        self.used = 0.0
        self.busy_until = 0.0
        self.bytes_written = 0.0
        self.bytes_read = 0.0
        self.bytes_evicted = 0.0
        self.hit_blocks = 0
        self.next: Tier | None = None  # spill target
        # remote storage on the fabric: (fabric, storage endpoint); its reads and writes are flows
        # sharing NIC links with KV transfers instead of a private FIFO device (set by the world)
        self.net = None

    def __contains__(self, key: Hashable) -> bool:
        return key in self.blocks

    def occupy(self, now: float, nbytes: float, bps: float) -> float:
        """Queue an I/O of ``nbytes``; returns its completion time."""
        start = now if now > self.busy_until else self.busy_until
        self.busy_until = device_io_end_s(start, nbytes, bps, self.latency)
        return self.busy_until

    def store(self, key: Hashable, nbytes: float, now: float, src: str | None = None) -> None:
        """Insert a block (async write from endpoint ``src``); evicts to the next tier when full."""
        if key in self.blocks:
            self.policy.on_access(self.blocks, key)
            return
        if nbytes > self.capacity:
            self.bytes_written += nbytes
            self.bytes_evicted += nbytes
            return
        while self.used + nbytes > self.capacity and self.blocks:
            victim = self.policy.victim(self.blocks)
            vbytes = self.blocks.pop(victim)
            self.used -= vbytes
            self.bytes_evicted += vbytes
            if self.next is not None:
                self.next.store(victim, vbytes, now, src)
        self.blocks[key] = nbytes
        self.policy.on_insert(self.blocks, key)
        self.used += nbytes
        self.bytes_written += nbytes
        if self.net is not None and src is not None:
            fabric, endpoint = self.net
            fabric.send(src, endpoint, nbytes, self.write_bps, background_write_done)
        else:
            self.occupy(now, nbytes, self.write_bps)

    def read_blocks(self, keys: list[Hashable]) -> float:
        """Account a read of ``keys`` (they stay resident); returns its bytes."""
        nbytes = 0.0
        for k in keys:
            nbytes += self.blocks[k]
            self.policy.on_access(self.blocks, k)
        self.bytes_read += nbytes
        self.hit_blocks += len(keys)
        return nbytes

    def load(self, keys: list[Hashable], now: float) -> float:
        """Read blocks back on the device (they stay resident); returns the completion time."""
        return self.occupy(now, self.read_blocks(keys), self.read_bps)

    def estimate(self, nbytes: float, now: float) -> float:
        start = now if now > self.busy_until else self.busy_until
        return device_io_end_s(start, nbytes, self.read_bps, self.latency)

    def stats(self) -> dict:
        return {"tier": self.name, "device": self.device.kind, "capacity_bytes": self.capacity,
                "resident_bytes": self.used, "bytes_written": self.bytes_written,
                "bytes_read": self.bytes_read, "bytes_evicted": self.bytes_evicted, "hit_blocks": self.hit_blocks}


def background_write_done(_flow) -> None:
    """Completion of a background write to a remote tier: nothing waits for it (its bytes were
    counted when it was stored), so a run may end with one still on the fabric."""


class TierStack:
    """Ordered tiers (fastest first) under one instance; shared tiers may appear in several."""

    def __init__(self, tiers: list[Tier], block_bytes: float, pcie_bps: float = float("inf")):
        self.tiers = tiers
        self.block_bytes = block_bytes
        self.endpoint: str | None = None  # the instance's NIC endpoint (remote tiers' flows end there)
        # without GPUDirect Storage every byte from SSD or remote storage lands in host memory
        # and crosses PCIe to the GPU: loads take at least bytes / pcie_bps
        self.pcie_bps = pcie_bps

    def find(self, key: Hashable) -> Tier | None:
        for t in self.tiers:
            if key in t.blocks:
                return t
        return None

    def lookup(self, keys, start: int, stop: int) -> list[tuple[Hashable, Tier]]:
        """Contiguous blocks keys[start:stop] found below HBM, with the tier holding each."""
        found = []
        for j in range(start, stop):
            t = self.find(keys[j])
            if t is None:
                break
            found.append((keys[j], t))
        return found

    def estimate_load(self, found: list[tuple[Hashable, Tier]], now: float) -> float:
        per: dict[int, tuple[Tier, float]] = {}
        for _k, t in found:
            tier, b = per.get(id(t), (t, 0.0))
            per[id(t)] = (tier, b + self.block_bytes)
        end = max((t.estimate(b, now) for t, b in per.values()), default=now)
        return max(end - now, pcie_floor_s(len(found) * self.block_bytes, self.pcie_bps))

    def load(self, found: list[tuple[Hashable, Tier]], now: float, on_remote=None) -> tuple[float, int]:
        """Load the blocks (tiers in parallel). Returns (seconds until the blocks of device tiers
        have arrived, fabric flows started for remote tiers: ``on_remote()`` is called at the end
        of each)."""
        per: dict[int, tuple[Tier, list]] = {}
        for k, t in found:
            per.setdefault(id(t), (t, []))[1].append(k)
        end = now
        flows = 0
        local_blocks = 0
        for t, ks in per.values():
            if t.net is not None and on_remote is not None and self.endpoint is not None:
                fabric, endpoint = t.net
                fabric.send(endpoint, self.endpoint, t.read_blocks(ks), self.pcie_bps, lambda _f: on_remote())
                flows += 1
            else:
                e = t.load(ks, now)
                end = e if e > end else end
                local_blocks += len(ks)
        return max(end - now, pcie_floor_s(local_blocks * self.block_bytes, self.pcie_bps)), flows

    def store(self, key: Hashable, now: float) -> None:
        if self.tiers and self.find(key) is None:
            self.tiers[0].store(key, self.block_bytes, now, self.endpoint)
