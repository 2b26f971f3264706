"""The request ledger: every request's record columns, written the moment it is done.

A finished or dropped request is copied into preallocated numpy columns (the RunRecord's
REQUEST_COLUMNS, indexed by request id) and its stretches of decode steps into four growing
integer arrays; the world then forgets the ``Request`` object. Memory for a run is the
columns (~190 bytes per request) plus the requests still in flight, not a Python object per
request ever served.
"""
from __future__ import annotations

from array import array
from operator import attrgetter

import numpy as np

from .record import REQUEST_FLOAT, REQUEST_INT, empty_requests

# RunRecord request column -> Request attribute
REQUEST_ATTR = {
    "request_id": "rid", "arrival_s": "arrival", "input_len": "input_len", "output_len": "output_len",
    "cached_tokens": "cached_tokens", "prefill_instance": "p_inst", "decode_instance": "d_inst",
    "routed_s": "routed", "prefill_start_s": "prefill_start", "prefill_end_s": "prefill_end",
    "transfer_start_s": "transfer_start", "transfer_end_s": "transfer_end", "decode_alloc_s": "d_alloc",
    "decode_admit_s": "decode_admit", "first_token_s": "first_token", "finish_s": "finish",
    "preemptions": "preemptions", "recompute_tokens": "recompute_tokens", "transfer_bytes": "transfer_bytes",
    "kv_load_s": "kv_load_s", "loaded_tokens": "loaded_tokens", "d_load_s": "d_load_s", "recomputes": "recomputes",
    "retries": "retries", "priority": "priority",
}
_COPY = tuple((c, REQUEST_ATTR[c]) for c in REQUEST_FLOAT + REQUEST_INT if c in REQUEST_ATTR and c != "request_id")

#: requests staged as rows before they are copied into the columns (one fancy-indexed
#: assignment per column instead of one element assignment per field per request)
ROWS = 4096


class RequestLedger:
    """Record columns for ``n`` requests (request id = row)."""

    def __init__(self, n: int):
        self._cols = empty_requests(n)
        self._targets = tuple(self._cols[c] for c, _attr in _COPY) + (self._cols["drop_reason"],)
        self._fields = attrgetter("rid", *(attr for _c, attr in _COPY), "drop_reason")
        self._rows: list[tuple] = []
        # one entry per stretch of decode steps: request, instance, first and last step index
        self.seg = (array("q"), array("q"), array("q"), array("q"))
        self.written = 0

    def write(self, req) -> None:
        """Copy ``req``'s record fields (called once it is finished or dropped)."""
        rows = self._rows
        rows.append(self._fields(req))
        if len(rows) >= ROWS:
            self._flush()
        if req.segments:
            rid = req.rid
            r, i, a, b = self.seg
            for iid, first, last in req.segments:
                r.append(rid)
                i.append(iid)
                a.append(first)
                b.append(last)
        self.written += 1

    @property
    def cols(self) -> dict[str, np.ndarray]:
        """The record's request columns, every request written so far in them."""
        self._flush()
        return self._cols

    def _flush(self) -> None:
        rows = self._rows
        if not rows:
            return
        fields = list(zip(*rows))
        rids = np.asarray(fields[0], dtype=np.int64)
        for col, values in zip(self._targets, fields[1:]):
            col[rids] = values  # a row's values as the element assignment would convert them
        rows.clear()

    def write_unarrived(self, rid: int, arrival: float, input_len: int, output_len: int, reason: str,
                        priority: int = 0) -> None:
        """A request that never reached the router (it arrives after the run's horizon)."""
        c = self._cols
        c["priority"][rid] = priority
        c["arrival_s"][rid] = arrival
        c["input_len"][rid] = input_len
        c["output_len"][rid] = output_len
        c["drop_reason"][rid] = reason
        self.written += 1

    def segments(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(request, instance, first step, last step), sorted by request id; a request's
        stretches stay in the order they ran."""
        r, i, a, b = (np.frombuffer(x, dtype=np.int64) if len(x) else np.empty(0, dtype=np.int64) for x in self.seg)
        order = np.argsort(r, kind="stable")
        return r[order], i[order], a[order], b[order]
