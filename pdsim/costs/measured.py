"""A profile's own measured system constants (``calibration.memcopy`` and ``calibration.host``,
written by ``pdsim calibrate fit`` from a GPU session's memcopy.csv / launch.csv rows:
calibrate/fit_system.py) in place of the priors they measure.

- ``efficiency.hbm`` is NOT replaced by ``memcopy.hbm_eff`` (the device-to-device copy's
  bandwidth, bytes read + written, over the datasheet's): a streaming copy is the upper bound of
  the memory-bound kernels it would price (RMSNorm, SiLU x gate, quantisation: costs/
  elementwise.py), not a measurement of them, and at the sizes those kernels move in a prefill
  layer (~100-500 MB) the copy itself reaches 0.82-0.86 on the first H100 (0.88 only from 1 GB).
  The prior (0.8, borrowed) stays, with the measured copy beside it in the constants report.
- ``efficiency.kernel_launch_us`` <- ``host.eager_us_per_kernel``: the host's issue time per
  kernel launched, measured as eager / (layers x kernels per layer) of a whole torch decode step
  at batch 1, where the step is host-bound (the GPU idles between kernels, so the step is the
  issue time); costs/host.py then prices an eager layer's issue from the priced model's own
  structure (kernels x it; ``module_call_us`` stays 0: the measured per-kernel cost already
  holds the Python dispatch of each op), and costs/step.py exposes only what the step's GPU work
  does not hide. Without a kernel count: ``layer_launch_us`` <- ``host.eager_issue_us`` (the flat
  form: the same host-bound step per layer; step.py treats it as issue time too, so eager - graph
  would count the GPU work it overlapped twice).
- host copies (offload tiers): ``memcopy.host_copy_gbps``, the slower pinned direction, in place
  of ``gpu.pcie_gbps x efficiency.pcie`` (``host_copy_bps``).

The calibrated step model uses the eager launch cost (CalibratedStepCost); the roofline prior
keeps the profile's priors, so the step report compares the two honestly. A profile without
these entries is returned unchanged.
"""
from __future__ import annotations

import dataclasses


def with_measured_system(hw):
    """``hw`` with its measured eager launch cost in ``efficiency``."""
    cal = hw.calibration
    host = cal.get("host") or {}
    repl = {}
    if "eager_us_per_kernel" in host:  # the structural eager form: per kernel x the priced layer's kernels
        repl["kernel_launch_us"] = float(host["eager_us_per_kernel"])
    elif "eager_issue_us" in host:  # no kernel count: the flat per-layer issue time
        repl["layer_launch_us"] = float(host["eager_issue_us"])
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
