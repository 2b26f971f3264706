"""The workload of a real-run or session file as the trace readers return it (pdsim.workload.traces
dispatches here): its requests in send order, inter-arrival times scaled, windowed, limited."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..specs.errors import SpecError
from ..workload.table import RequestTable


def ingested_table(p: Path, fmt: str, time_scale: float = 1.0, limit: int | None = None, start_s: float = 0.0,
                   duration_s: float | None = None) -> RequestTable:
    from . import read_workload

    t = read_workload(p, fmt)
    keep = np.flatnonzero((t.arrival_s >= start_s) & (True if duration_s is None else t.arrival_s < start_s + duration_s))
    if limit is not None:
        keep = keep[:limit]
    if not len(keep):
        raise SpecError(f"no requests in the window start_s={start_s}", source=str(p))
    a = t.arrival_s[keep]
    out = RequestTable((a - a[0]) * time_scale, t.input_len[keep], t.output_len[keep],
                       [t.hash_ids[k] for k in keep] if t.hash_ids is not None else None, t.block_size,
                       t.max_concurrency, t.source, 0, dict(t.meta))
    out.meta.setdefault("format", fmt)
    return out
