"""Turn a WorkloadSpec into a RequestTable (deterministic by seed)."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from ..specs.errors import SpecError
from ..specs.workload import WorkloadSpec
from .generators import AGENT_OUTPUT, TOOL_AGENT, arrivals, conversations, lengths_for, sample_lengths
from .table import RequestTable
from .traces import read_trace


def materialize(spec: WorkloadSpec, seed: int = 0, base_dir: Path | None = None) -> RequestTable:
    rng = np.random.default_rng(seed)
    inp_d, out_d = lengths_for(spec)
    if spec.kind == "fixed_batch":
        n = spec.batch_size
        return RequestTable(np.zeros(n), sample_lengths(inp_d, n, rng), sample_lengths(out_d, n, rng),
                            source="fixed_batch")
    if spec.kind == "synthetic":
        n = spec.num_requests
        inp = sample_lengths(inp_d, n, rng)
        out = sample_lengths(out_d, n, rng)
        return RequestTable(arrivals(n, spec.rate, spec.burstiness, rng, spec.arrival), inp, out,
                            max_concurrency=spec.max_concurrency, source="synthetic")
    if spec.kind in ("multi_turn", "tool_agent"):
        conv = spec.conversation or (TOOL_AGENT if spec.kind == "tool_agent" else None)
        if conv is None:
            from ..specs.workload import ConversationSpec

            conv = ConversationSpec()
        out = AGENT_OUTPUT if spec.kind == "tool_agent" and spec.conversation is None else out_d
        t = conversations(conv, out, rng)
        t.max_concurrency = spec.max_concurrency
        return t
    tr = spec.trace
    path = Path(tr.path)
    if not path.is_absolute() and base_dir is not None and (base_dir / path).exists():
        path = base_dir / path
    if not path.exists():
        raise SpecError(f"trace file not found: {tr.path}", field="workload.trace.path")
    table = read_trace(path, tr.format, tr.time_scale, tr.limit, tr.start_s, tr.skip_bad_rows)
    table.max_concurrency = spec.max_concurrency
    return table


def rate_sweep(spec: WorkloadSpec, rates: list[float]) -> list[WorkloadSpec]:
    """The same workload at several request rates (req/s), as serving engineers sweep load."""
    return [replace(spec, rate=float(r)) for r in rates]


def scale_time(table: RequestTable, factor: float) -> RequestTable:
    """Multiply inter-arrival times by ``factor`` (smaller = heavier load); order is kept."""
    if factor <= 0:
        raise SpecError(f"time scale must be > 0, got {factor}", field="time_scale")
    a = table.arrival_s
    return RequestTable(a[0] + (a - a[0]) * factor, table.input_len.copy(), table.output_len.copy(),
                        table.hash_ids, table.block_size, table.max_concurrency, table.source, table.skipped_rows)
