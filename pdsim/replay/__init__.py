"""Replay a workload against a real server and record it as a RunRecord (``pdsim replay``).

``replay(table, ReplayConfig(endpoint, ...))`` -> RunRecord of kind ``real``;
``write_run_outputs`` writes the same files for simulated and real runs.
"""
from .client import ReplayConfig, RequestResult
from ..report.outputs import write_run_outputs
from .session import replay

__all__ = ["ReplayConfig", "RequestResult", "replay", "write_run_outputs"]
