"""A profile's own measured system constants (``calibration.memcopy`` and ``calibration.host``,
written by ``pdsim calibrate fit`` from a GPU session's memcopy.csv / launch.csv rows:
calibrate/fit_system.py) in place of the ``efficiency`` priors they measure.

- ``efficiency.hbm`` <- ``memcopy.hbm_eff``: the achieved device-to-device copy bandwidth
  (bytes read + written) over the datasheet HBM bandwidth; it prices the small memory-bound
  kernels between GEMMs (costs/elementwise.py).
- ``efficiency.layer_launch_us`` <- ``graph_launch_us + host.eager_exposed_us``: what an eager
  step pays per layer beyond a CUDA-graph replay, measured as (eager - graph) / layers of a whole
  decode step (costs/host.py's flat eager form, used while ``kernel_launch_us`` and
  ``module_call_us`` are 0).
- host copies (offload tiers): ``memcopy.host_copy_gbps``, the slower pinned direction, in place
  of ``gpu.pcie_gbps x efficiency.pcie`` (``host_copy_bps``).

The calibrated step model uses the first two (CalibratedStepCost); the roofline prior keeps the
profile's priors, so the step report compares the two honestly. A profile without these
entries is returned unchanged.
"""
from __future__ import annotations

import dataclasses


def with_measured_system(hw):
    """``hw`` with its measured HBM efficiency and eager launch cost in ``efficiency``."""
    cal = hw.calibration
    mc, host = cal.get("memcopy") or {}, cal.get("host") or {}
    repl = {}
    if "hbm_eff" in mc:
        repl["hbm"] = min(1.0, float(mc["hbm_eff"]))
    if "eager_exposed_us" in host:
        repl["layer_launch_us"] = hw.efficiency.graph_launch_us + float(host["eager_exposed_us"])
    if not repl:
        return hw
    return dataclasses.replace(hw, efficiency=dataclasses.replace(hw.efficiency, **repl))


def host_copy_bps(hw) -> float:
    """Bytes/s one GPU copies between host memory and HBM: measured (pinned, slower direction)
    where the profile has it, else the datasheet-derived ``gpu.pcie_gbps x efficiency.pcie``."""
    mc = hw.calibration.get("memcopy") or {}
    if "host_copy_gbps" in mc:
        return float(mc["host_copy_gbps"]) * 1e9
    return hw.gpu.pcie_gbps * 1e9 * hw.efficiency.pcie
