"""Network topology: which links a byte crosses between two endpoints (specs NetworkSpec).

``Topology`` is a networkx graph whose edges are named links with a capacity in bytes/s. An
instance joins it with one NIC link (its GPUs' NIC share at RDMA efficiency) to its node's
switch; a node's switch hangs off:
- ``single_switch``: one non-blocking switch for the whole cluster (node switches are the
  cluster switch);
- ``leaf_spine`` / ``rail``: leaf switches of ``nodes_per_leaf`` nodes (for ``rail``, a rail
  group; a P/D transfer stripes over every NIC, NIC i to NIC i, so at instance granularity a
  rail group is a leaf), each with uplinks to the spine of (the leaf's NIC bandwidth) /
  ``oversubscription``: traffic between leaves shares them.
Instances sharing a node also reach each other over NVLink (or PCIe peer-to-peer): a
``<instance>.nvl`` endpoint per instance, linked to the node's NVSwitch at the instance's
peer bandwidth. Remote storage services attach to the spine (``attach_storage``), so offload
reads and writes share NIC links with KV transfers.
"""
from __future__ import annotations

import networkx as nx

SWITCH = "fabric"


class Topology:
    def __init__(self, kind: str = "single_switch", nodes_per_leaf: int = 32, oversubscription: float = 1.0):
        self.kind = kind
        self.nodes_per_leaf = nodes_per_leaf
        self.oversubscription = oversubscription
        self.graph = nx.Graph()
        self.graph.add_node(SWITCH)
        self._leaf_bw: dict[str, float] = {}

    def _leaf(self, node: str) -> str:
        if self.kind == "single_switch":
            return SWITCH
        key, _, idx = node.partition("/node")
        return f"{key}/leaf{int(idx) // self.nodes_per_leaf}"

    def attach(self, endpoint: str, link_name: str, capacity_bps: float, node: str | None = None) -> None:
        """Connect ``endpoint`` (an instance's NICs) with one link of ``capacity_bps`` bytes/s to
        the switch of ``node`` (its first node); leaf uplinks grow with what hangs below them."""
        leaf = self._leaf(node) if node is not None else SWITCH
        self.graph.add_edge(endpoint, leaf, name=link_name, capacity=capacity_bps)
        if leaf != SWITCH:
            self._leaf_bw[leaf] = self._leaf_bw.get(leaf, 0.0) + capacity_bps
            up = self._leaf_bw[leaf] / self.oversubscription
            self.graph.add_edge(leaf, SWITCH, name=f"{leaf}.uplink", capacity=up)

    def attach_nvlink(self, endpoint: str, node: str, capacity_bps: float) -> None:
        """Connect ``endpoint`` (an instance's NVLink side) to ``node``'s NVSwitch."""
        self.graph.add_edge(endpoint, f"{node}.nvswitch", name=f"{endpoint}", capacity=capacity_bps)

    def attach_storage(self, endpoint: str, capacity_bps: float) -> None:
        """A remote storage service (NVMe-oF) on the spine, serving at ``capacity_bps``."""
        self.graph.add_edge(endpoint, SWITCH, name=f"{endpoint}.link", capacity=capacity_bps)
