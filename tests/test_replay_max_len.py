"""pdsim replay and the server's max_model_len: a public trace's longest rows are refused up front
(naming how many, the first, and what to do) or left out and counted with --skip-too-long."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("aiohttp")

from pdsim.replay import ReplayConfig, replay  # noqa: E402
from pdsim.replay.session import fit_max_model_len  # noqa: E402
from pdsim.specs.errors import SpecError  # noqa: E402
from pdsim.workload.table import RequestTable  # noqa: E402

from test_replay import FakeServer  # noqa: E402  (max_model_len 4096)


def _table() -> RequestTable:
    # request 1 needs 4,000 + 200 > 4,096; request 3 exactly 4,096 fits
    return RequestTable(np.arange(4) * 0.01, np.array([8, 4000, 8, 4000]), np.array([5, 200, 5, 96]),
                        hash_ids=[np.array([i]) for i in range(4)], source="test")


def test_too_long_requests_are_refused_naming_the_first():
    with pytest.raises(SpecError) as err:
        fit_max_model_len(_table(), 4096, skip=False)
    msg = str(err.value)
    assert "1 of 4 requests" in msg and "request 1: 4000 + 200" in msg
    assert "--skip-too-long" in msg and "--max-model-len" in msg


def test_skip_too_long_keeps_the_others_with_their_hashes():
    t, n = fit_max_model_len(_table(), 4096, skip=True)
    assert n == 1 and len(t) == 3
    assert list(t.input_len) == [8, 8, 4000] and [int(h[0]) for h in t.hash_ids] == [0, 2, 3]
    assert fit_max_model_len(_table(), None, skip=False)[1] == 0  # a server that does not say: all sent


def test_replay_against_a_server_records_what_it_skipped():
    small = RequestTable(np.arange(3) * 0.01, np.array([8, 5000, 8]), np.array([3, 3, 3]), source="test")
    with FakeServer() as srv:
        with pytest.raises(SpecError, match="max_model_len 4096"):
            replay(small, ReplayConfig(srv.url), name="t")
        rec = replay(small, ReplayConfig(srv.url, skip_too_long=True), name="t")
    assert len(rec) == 2 and rec.meta["skipped_too_long"] == 1
    assert list(rec.requests["output_tokens"]) == [3, 3]


def test_skip_too_long_that_leaves_nothing_is_refused():
    # every request past max_model_len: --skip-too-long would send nothing and write an empty recording
    # that exits 0 (it did: "0 sent", rc 0)
    t = RequestTable(np.zeros(2), np.array([5000, 4097]), np.array([3, 3]), source="test")
    with pytest.raises(SpecError, match="all 2 requests need more than the server's max_model_len 4096"):
        fit_max_model_len(t, 4096, skip=True)
