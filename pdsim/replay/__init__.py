"""Replay a workload against a real server and record it as a RunRecord (``pdsim replay``).

``replay(table, ReplayConfig(endpoint, ...))`` -> RunRecord of kind ``real``;
``write_run_outputs`` writes the same files for simulated and real runs.

The names are imported on first use, so ``python -m pdsim.replay.pd_proxy`` starts without the
report and metrics stack (a second instead of several on a busy machine).
"""
from __future__ import annotations

__all__ = ["ReplayConfig", "RequestResult", "replay", "write_run_outputs"]


def __getattr__(name: str):
    if name in ("ReplayConfig", "RequestResult"):
        from . import client
        return getattr(client, name)
    if name == "replay":
        from .session import replay
        return replay
    if name == "write_run_outputs":
        from ..report.outputs import write_run_outputs
        return write_run_outputs
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
