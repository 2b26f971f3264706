"""The host a run's engines share their CPU cores with, as measured during that run."""
from __future__ import annotations

from dataclasses import dataclass

from ._convert import check


@dataclass(frozen=True)
class HostSpec:
    """``cpu_stretch``: how much longer the engine's steps took than on a quiet host because other
    work shared its cores (processor sharing), >= 1; 1 = the host the profile was measured on, as
    quiet as then. Measured, never fitted: the same steps (fixed-batch decode steps, a prompt
    alone; ``calibration/microbench/cpu_overhead.py``, ``cpu_mixed_steps.py``) timed under the
    run's other load and without it, the ratio of the two. The kernel's run-queue wait of the
    worker (``calibration/microbench/host_share.py``) is not that ratio: on the CPU validation host
    it read 1.17 and 1.19 in two knee runs whose steps took the same time shape for shape (the
    worker waits mostly while it polls for the next step). On a profile whose device is the host's
    CPU (``gpu.arch: cpu``) the whole step runs on the shared cores and stretches; on a GPU
    profile only its per-step host work does (``step_overhead_us``, ``seq_overhead_us``,
    ``ctx_overhead_ns``)."""

    cpu_stretch: float = 1.0

    def __post_init__(self) -> None:
        check(1.0 <= self.cpu_stretch <= 100.0, f"must be in [1, 100] (a stretch factor), got {self.cpu_stretch}",
              "cpu_stretch")
