"""The host a run's engines share their CPU cores with, as measured during that run."""
from __future__ import annotations

from dataclasses import dataclass

from ._convert import check


@dataclass(frozen=True)
class HostSpec:
    """``cpu_stretch``: how much longer the engine's work took than on cores of its own because
    other work shared them (processor sharing), >= 1; 1 = cores of its own. Measured, never
    fitted: the model worker's ``(run + run-queue wait) / run`` over the run, from the kernel's
    ``/proc/<pid>/schedstat`` (``calibration/microbench/host_share.py``; ``validation/cpu-vllm/
    here.py --trace-steps`` records it per load), relative to the same figure while the profile
    was measured (1 for a profile that does not record it). On a profile whose device is the
    host's CPU (``gpu.arch: cpu``) the whole step runs on the shared cores and stretches; on a GPU
    profile only its per-step host work does (``step_overhead_us``, ``seq_overhead_us``,
    ``ctx_overhead_ns``)."""

    cpu_stretch: float = 1.0

    def __post_init__(self) -> None:
        check(1.0 <= self.cpu_stretch <= 100.0, f"must be in [1, 100] (a stretch factor), got {self.cpu_stretch}",
              "cpu_stretch")
