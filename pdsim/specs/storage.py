"""KV offload: storage devices (host DRAM, local NVMe, remote NVMe-oF) and the tier stack a
scenario puts under each prefill-capable instance (LMCache-style).

Units: ``_gib`` 2**30 bytes, ``_gbps`` 1e9 bytes/s, ``_us`` microseconds.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ._convert import check, load_spec


@dataclass(frozen=True)
class StorageDevice:
    """One storage tier as seen from a GPU: capacity, sustained read/write bandwidth, latency.

    ``host_dram`` moves over PCIe, so its bandwidth is the PCIe figure, not DRAM's own.
    ``remote`` is reached over the storage fabric (NVMe-oF on RoCE, no GPUDirect Storage):
    bandwidth = min(NIC line rate x efficiency, the storage nodes' aggregate).
    """

    kind: Literal["host_dram", "local_ssd", "remote"]
    capacity_gib: float
    read_gbps: float
    write_gbps: float
    latency_us: float
    shared: bool = False  # one pool for the whole cluster (remote storage) vs per instance
    description: str = ""
    source: str = ""

    def __post_init__(self) -> None:
        for f in ("capacity_gib", "read_gbps", "write_gbps"):
            check(getattr(self, f) > 0, f"must be > 0, got {getattr(self, f)}", f)
        check(self.latency_us >= 0, "must be >= 0", "latency_us")
        check(bool(self.source), "every storage figure needs a source", "source")


@dataclass(frozen=True)
class StorageCatalog:
    devices: dict[str, StorageDevice]


@dataclass(frozen=True)
class TierSpec:
    """A tier of the offload stack: a device key from hardware_profiles/storage.yaml, with
    optional capacity override (GiB)."""

    device: str
    capacity_gib: float | None = None

    def __post_init__(self) -> None:
        check(self.capacity_gib is None or self.capacity_gib > 0, "must be > 0", "capacity_gib")


@dataclass(frozen=True)
class OffloadSpec:
    """KV offload below HBM. Tiers are ordered fastest first; a block evicted from HBM is
    written to the first tier, and a full tier spills its LRU blocks to the next one (a host
    DRAM tier over a local SSD is how DRAM pressure turns into disk thrashing).

    - ``write_through``: store every prefilled block in the first tier at once (LMCache's
      store-on-prefill), not only on HBM eviction.
    - ``load_policy``: on a prefix hit below HBM, ``cheaper`` loads or recomputes whichever
      the prices say is faster; ``load`` / ``recompute`` force one.
    - ``eviction``: policy key of the tiers' eviction registry (``lru``, ``fifo``) or
      ``package.module:ClassName``.
    """

    tiers: tuple[TierSpec, ...] = ()
    write_through: bool = True
    load_policy: Literal["cheaper", "load", "recompute"] = "cheaper"
    eviction: str = "lru"
    block_size: int | None = None  # tokens per cached block; None = the trace's block size

    def __post_init__(self) -> None:
        check(len(self.tiers) >= 1, "give at least one tier", "tiers")
        check(self.block_size is None or self.block_size >= 1, "must be >= 1", "block_size")


def load_storage_catalog(path: str | Path) -> StorageCatalog:
    return load_spec(StorageCatalog, path, "devices")
