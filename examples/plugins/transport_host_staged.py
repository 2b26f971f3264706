"""Example transport plug-in: KV staged through host memory (a TCP-style connector without
GPUDirect RDMA). Like Mooncake, D pre-allocates while P prefills; the bytes then cross P's PCIe
to host memory, the NIC, and D's PCIe back to the GPU, each copy in turn.

Use it: `transfer: {backend: "transport_host_staged:HostStaged", params: {pcie_gbps: 25}}` with
`pdsim run SCENARIO --allow-plugin transport_host_staged` (this folder on PYTHONPATH).
"""
from __future__ import annotations

from dataclasses import dataclass

from pdsim.sim.transports import Mooncake


class HostStaged(Mooncake):
    @dataclass(frozen=True)
    class Params:
        pcie_gbps: float = 25.0  # host <-> GPU copy bandwidth on each side, GB/s

    def start(self, req) -> None:
        p, d = self.ctx.instance(req.p_inst), self.ctx.instance(req.d_inst)
        pair = self.ctx.pair(p, d)
        req.transfer_start = self.env.now
        plan = self.plan(req, pair)
        req.transfer_bytes = plan.nbytes
        staging = 2.0 * plan.nbytes / (self.params.pcie_gbps * 1e9)  # GPU -> host on P, host -> GPU on D
        self.send(req, p, d, plan.nbytes, plan.fixed_s + staging, pair.flow_cap(plan.senders),
                  lambda: self.done(req, p, d))
