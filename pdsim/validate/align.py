"""Simulate exactly the requests of a real run, aligned one to one.

The simulated workload is the real run's requests in send order: the same input and output
lengths, and either the same send times (``send_times``: open loop, what a Poisson benchmark
is) or the same closed loop (``closed_loop``: all ready at t=0, at most ``max_concurrency`` in
flight, as ``--max-concurrency`` benchmarks run). ``auto`` takes the closed loop when the run
recorded a max concurrency, else the send times. Requests that were never sent are left out.
Simulated request i is the i-th real request sent.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..metrics.results import Results
from ..sim.record import RunRecord
from ..specs.errors import SpecError
from ..specs.machine import autogroup_mismatch
from ..workload.table import RequestTable


@dataclass
class Aligned:
    real: Results
    sim: Results
    pairs: np.ndarray  # (k, 2): real request index, simulated request index
    arrivals: str  # send_times | closed_loop
    table: RequestTable
    prefix_note: str = ""  # whether the run's prefix structure was carried (validate/prefix.py)
    host_note: str = ""  # the recording's autogroup setting against the scenario's, when they differ


def workload_of(rec: RunRecord, arrivals: str = "auto", max_concurrency: int | None = None
                ) -> tuple[RequestTable, np.ndarray, str]:
    """(table, real index of each table row, arrival mode used)."""
    req = rec.requests
    sent = np.flatnonzero(~np.isnan(np.asarray(req["arrival_s"], dtype=float)))
    if not len(sent):
        raise SpecError("the real run sent no request", source=str(rec.meta.get("source", rec.name)))
    a = np.asarray(req["arrival_s"], dtype=float)[sent]
    order = sent[np.argsort(a, kind="stable")]
    cc = max_concurrency or rec.meta.get("max_concurrency")
    cc = int(cc) if isinstance(cc, (int, np.integer)) and cc >= 1 else None
    if arrivals == "auto":
        arrivals = "closed_loop" if cc else "send_times"
    if arrivals not in ("send_times", "closed_loop"):
        raise SpecError(f"expected auto, send_times or closed_loop, got {arrivals!r}", field="--arrivals")
    if arrivals == "closed_loop" and not cc:
        raise SpecError("closed_loop arrivals need a max concurrency (the run recorded none; give --max-concurrency)",
                        field="--arrivals")
    t = np.asarray(req["arrival_s"], dtype=float)[order]
    t = t - t[0]
    if arrivals == "closed_loop":
        t = np.zeros(len(order))
    out_len = np.maximum(np.asarray(req["output_len"])[order], 1)
    table = RequestTable(t, np.asarray(req["input_len"])[order], out_len,
                         max_concurrency=cc if arrivals == "closed_loop" else None,
                         source=f"requests of real run {rec.name}", meta={"arrivals": arrivals})
    return table, order, arrivals


def simulate_aligned(real: RunRecord, scenario, arrivals: str = "auto",
                     max_concurrency: int | None = None) -> Aligned:
    """Simulate the real run's requests under ``scenario`` (a ResolvedScenario)."""
    from .. import api

    from .prefix import with_prefix

    table, order, mode = workload_of(real, arrivals, max_concurrency)
    table, note = with_prefix(table, real.meta, order, scenario)
    sim = api.simulate(scenario, table=table)
    pairs = np.column_stack([order, np.arange(len(order))])
    host = autogroup_mismatch(scenario.scenario.host, real.meta.get("sched_autogroup"))
    return Aligned(Results(real), sim, pairs, mode, table, note, f"host: {host}" if host else "")
