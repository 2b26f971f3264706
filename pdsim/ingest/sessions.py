"""Mooncake-style traces with sessions (AIPerf ``mooncake_trace`` multi-turn / Dynamo) as a workload.

Rows (ai-dynamo/aiperf ``src/aiperf/dataset/loader/mooncake_trace.py`` and ``models.py``
``MooncakeTrace``): ``session_id``, ``input_length``, ``output_length``, optional ``hash_ids``,
and either ``timestamp`` (ms: when the session's turn is sent) or ``delay`` (ms to wait
before sending the turn, after the previous turn of the same session). A session's first turn
without a timestamp starts at 0.

pdsim's request table is open loop: a turn with a ``delay`` arrives ``delay`` after the
previous turn's *arrival* (the previous answer's decode time is not added: the table cannot
wait for a simulated answer), which the table's source line states. Rows without
``session_id`` are single-turn sessions. ``hash_ids`` count ``block_size`` tokens per id.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..specs.errors import SpecError
from ..specs.workload import check_span
from ..workload.table import RequestTable
from . import checks
from .common import json_objects


def read_sessions(path: str | Path, block_size: int = 512) -> RequestTable:
    p = Path(path)
    last_t: dict[str, float] = {}
    rows = []
    for lineno, d in json_objects(p):
        sid = str(d.get("session_id", f"__row{lineno}"))
        where = f"line {lineno}: "
        n_in, n_out = (checks.tokens(d.get(key), p, where, key) for key in ("input_length", "output_length"))
        if d.get("timestamp") is not None:
            t = checks.seconds(d["timestamp"], p, where, "timestamp", signed=True) / 1000.0
        elif d.get("delay") is not None:
            if sid not in last_t:
                raise SpecError(f"line {lineno}: delay: the first turn of session {sid!r} needs a timestamp or no "
                                "delay", source=str(p))
            t = last_t[sid] + checks.seconds(d["delay"], p, where, "delay", signed=True) / 1000.0
        else:
            t = last_t.get(sid, 0.0)
        if t < 0:
            raise SpecError(f"line {lineno}: timestamp/delay: expected >= 0", source=str(p))
        h = d.get("hash_ids")
        if h is not None and (not isinstance(h, list) or not all(isinstance(x, int) for x in h)):
            raise SpecError(f"line {lineno}: hash_ids: expected a list of integers", source=str(p))
        last_t[sid] = t
        rows.append((t, n_in, n_out, h))
    if not rows:
        raise SpecError("no rows", source=str(p))
    order = np.argsort([r[0] for r in rows], kind="stable")
    t = np.array([rows[i][0] for i in order])
    try:
        check_span(float(t[-1] - t[0]), "timestamp/delay", "the turns' send times")
    except SpecError as err:
        raise SpecError(f"{err.field}: {err.message}", source=str(p)) from None
    hids = None
    if all(rows[i][3] is not None for i in order):
        hids = [np.asarray(rows[i][3], dtype=np.int64) for i in order]
    return RequestTable(t - t[0], [rows[i][1] for i in order], [rows[i][2] for i in order], hash_ids=hids,
                        block_size=block_size,
                        source=f"{p} (sessions: a turn's delay counts from the previous turn's arrival)",
                        meta={"format": "mooncake-sessions", "sessions": len(last_t)})
