"""Example fault plug-in: a rolling restart (maintenance, a version upgrade) of every instance
of one role, one at a time: each is taken down, comes back after its priced restart, and the
next one goes ``gap_s`` after that.

Use it: `faults: {plugins: [{policy: "fault_rolling_restart:RollingRestart", params: {role: decode}}]}`
with `pdsim run SCENARIO --allow-plugin fault_rolling_restart` (this folder on PYTHONPATH).
"""
from __future__ import annotations

from dataclasses import dataclass

from pdsim.sim.control.faults import FaultModel


class RollingRestart(FaultModel):
    @dataclass(frozen=True)
    class Params:
        role: str = "decode"
        start_s: float = 60.0
        gap_s: float = 30.0

    def start(self, ctl) -> None:
        def run():
            yield ctl.env.timeout(self.params.start_s)
            for inst in [i for i in ctl.world.instances if i.role == self.params.role]:
                ctl.kill_gpu(inst.name, 0, recover_after_s=0.0)
                while inst.state != "up":  # wait until it serves again
                    yield ctl.env.timeout(1.0)
                yield ctl.env.timeout(self.params.gap_s)
        ctl.env.process(run())
