"""Where each instance of a scenario runs: physical nodes, GPUs within a node, ports.

Instances are placed in the order of the scenario's groups (prefill, decode, colocated): an
instance of ``nodes: k`` takes k whole nodes of its own (k x pp_size with pipeline
parallelism); instances of ``gpus: g`` (g below a node) are packed onto nodes GPU by GPU, P and
D alike, so a 1P1D of one-GPU instances shares one node. A group with its own hardware
(heterogeneous clusters) gets nodes of that profile, never shared with another profile's. Nodes are named by index (the scripts refer to them as ``${NODE_<i>}``). Ports: the
HTTP port is 30000 (vLLM: 20000, clear of its proxy's 30001) + the instance's index; a prefill instance's KV bootstrap port (SGLang) is
8998 + its index; a multi-node instance's ``--dist-init-addr`` uses port 5000 on its first node.
"""
from __future__ import annotations

from dataclasses import dataclass

HTTP_PORT = 30000
BOOTSTRAP_PORT = 8998
DIST_PORT = 5000


@dataclass(frozen=True)
class Placement:
    """One instance: its group, its nodes (first = rank 0) and, within a node, its first GPU."""

    index: int  # instance index in the world's order
    hardware: str  # the profile of its nodes
    name: str  # as the simulator names it (P0.1, D0, C0)
    role: str
    group_index: int
    group: object  # GroupSpec
    nodes: tuple[int, ...]
    base_gpu: int  # first GPU on its node (0 for whole-node instances)
    gpus: int  # GPUs per instance
    http_port: int
    bootstrap_port: int

    @property
    def multi_node(self) -> bool:
        return len(self.nodes) > 1


def place(cluster, gpus_per_node, http_base: int = HTTP_PORT) -> tuple[list[Placement], int]:
    """(placements, number of nodes used) for a ClusterSpec. ``gpus_per_node(role, index)`` gives
    (profile name, GPUs per node) of a group's nodes; HTTP ports count up from ``http_base``."""
    out: list[Placement] = []
    next_node = 0
    open_node, open_used, open_hw = None, 0, None  # the node sub-node instances are being packed onto
    for role in ("prefill", "decode", "colocated"):
        groups = getattr(cluster, role)
        for gi, g in enumerate(groups):
            hw_name, gpn = gpus_per_node(role, gi)
            label = g.name or f"{role[0].upper()}{gi}"
            for k in range(g.count):
                index = len(out)
                name = f"{label}.{k}" if g.count > 1 or len(groups) > 1 else label
                gpus = g.gpus_per_instance(gpn)
                if g.nodes is not None or gpus > gpn:  # whole nodes (pipeline stages may span several)
                    n = g.nodes * g.pp if g.nodes is not None else -(-gpus // gpn)
                    nodes = tuple(range(next_node, next_node + n))
                    next_node += n
                    base = 0
                else:
                    if open_node is None or open_hw != hw_name or open_used + gpus > gpn:
                        open_node, open_used, open_hw = next_node, 0, hw_name
                        next_node += 1
                    nodes, base = (open_node,), open_used
                    open_used += gpus
                out.append(Placement(index, hw_name, name, role, gi, g, nodes, base, gpus, http_base + index,
                                     BOOTSTRAP_PORT + index))
    return out, next_node


def gpus_per_node_of(resolved):
    """``gpus_per_node(role, index)`` for ``place``: a group's own profile, else the scenario's."""
    def of(role: str, index: int) -> tuple[str, int]:
        hw = resolved.hardware_of(role, index)
        return hw.name, hw.gpus_per_node
    return of


def node_var(node: int) -> str:
    """The shell variable holding a node's address."""
    return f"${{NODE_{node}}}"
