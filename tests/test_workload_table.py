"""RequestTable.head: the first requests with every column (pdsim replay --limit, here.py --workload)."""
from __future__ import annotations

import numpy as np

from pdsim.workload.table import RequestTable


def _table() -> RequestTable:
    return RequestTable(np.arange(5.0), np.full(5, 300), np.arange(1, 6), [np.array([i, i + 1]) for i in range(5)],
                        block_size=128, source="spec.yaml", meta={"request_rate": 2.0},
                        priority=np.array([0, 1, 0, 1, 2]))


def test_head_keeps_every_column_of_the_first_requests():
    t = _table()
    h = t.head(3)
    assert len(h) == 3 and list(h.output_len) == [1, 2, 3] and list(h.priority) == [0, 1, 0]
    assert [list(x) for x in h.hash_ids] == [[0, 1], [1, 2], [2, 3]]
    assert (h.block_size, h.source, h.meta) == (128, "spec.yaml", {"request_rate": 2.0})
    h.meta["request_rate"] = 9.0  # the copy's provenance is its own
    assert t.meta["request_rate"] == 2.0 and len(t) == 5


def test_head_past_the_end_is_the_whole_table():
    t = RequestTable(np.zeros(2), np.array([10, 20]), np.array([1, 1]))
    h = t.head(10)
    assert len(h) == 2 and h.hash_ids is None and h.priority is None

