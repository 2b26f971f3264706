"""The network: a topology of links (topology.py) and the flows sharing them (fabric.py)."""
from .fabric import Fabric, Flow
from .topology import SWITCH, Topology

__all__ = ["Fabric", "Flow", "Topology", "SWITCH"]
