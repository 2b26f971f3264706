"""Network topology: which links a byte crosses between two endpoints.

``Topology`` is a networkx graph whose edges are named links with a capacity in bytes/s.
Today's layout is one non-blocking switch: every instance's NICs form one link (capacity =
its GPUs' NIC share at RDMA efficiency) to the switch, so a transfer is limited by the
sender's and the receiver's NIC links and by the flows sharing them.
"""
from __future__ import annotations

import networkx as nx

SWITCH = "fabric"


class Topology:
    def __init__(self) -> None:
        self.graph = nx.Graph()
        self.graph.add_node(SWITCH)

    def attach(self, endpoint: str, link_name: str, capacity_bps: float) -> None:
        """Connect ``endpoint`` to the switch with one link of ``capacity_bps`` bytes/s."""
        self.graph.add_edge(endpoint, SWITCH, name=link_name, capacity=capacity_bps)
