"""The request ledger: every request's record columns, written the moment it is done.

A finished or dropped request is copied into preallocated numpy columns (the RunRecord's
REQUEST_COLUMNS, indexed by request id) and its stretches of decode steps into four growing
integer arrays; the world then forgets the ``Request`` object. Memory for a run is the
columns (~190 bytes per request) plus the requests still in flight, not a Python object per
request ever served.
"""
from __future__ import annotations

import struct
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
        self._targets = tuple(self._cols[c] for c, _attr in _COPY)
        # a request's numbers as one tuple (request id first); its drop reason, if any, apart
        self._fields = attrgetter("rid", *(attr for _c, attr in _COPY))
        self._rows: list[tuple] = []
        self._reasons: list[tuple[int, str]] = []
        # each staged row is packed into one buffer (a C loop over its numbers) read as records
        kinds = [("rid", "q", np.int64)] + [(c, "d" if c in REQUEST_FLOAT else "q",
                                             np.float64 if c in REQUEST_FLOAT else np.int64) for c, _attr in _COPY]
        self._row = struct.Struct("=" + "".join(code for _c, code, _dt in kinds))
        self._row_dtype = np.dtype([(c, dt) for c, _code, dt in kinds])
        assert self._row.size == self._row_dtype.itemsize
        # one entry per stretch of decode steps: request, instance, first and last step index
        self.seg = (array("q"), array("q"), array("q"), array("q"))
        self.written = 0

    def write(self, req) -> None:
        """Copy ``req``'s record fields (called once it is finished or dropped)."""
        rows = self._rows
        rows.append(self._fields(req))
        if req.drop_reason is not None:
            self._reasons.append((req.rid, req.drop_reason))
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
        if rows:
            pack, size = self._row.pack_into, self._row.size
            buf = bytearray(size * len(rows))
            try:
                for k, row in enumerate(rows):
                    pack(buf, k * size, *row)
            except struct.error:  # a value the packing refuses (a float in an integer field): as numpy converts it
                fields = list(zip(*rows))
                rids = np.asarray(fields[0], dtype=np.int64)
                for col, values in zip(self._targets, fields[1:]):
                    col[rids] = values
            else:
                rec = np.frombuffer(buf, dtype=self._row_dtype)
                rids = rec["rid"]
                for col, name in zip(self._targets, self._row_dtype.names[1:]):
                    col[rids] = rec[name]
            rows.clear()
        if self._reasons:
            reason = self._cols["drop_reason"]
            for rid, why in self._reasons:
                reason[rid] = why
            self._reasons.clear()

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
