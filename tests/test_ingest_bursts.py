"""Tokens that reached the client in bursts (gaps of 0 s) are named on reading a real run: its ITL
percentiles are then the client's, not the engine's (pdsim/ingest/bursts.py)."""
from __future__ import annotations

import json

from pdsim.ingest import read_run
from pdsim.ingest.bursts import burst_note, zero_gap_share


def test_the_share_of_zero_gaps_is_named_past_five_percent():
    even = [[0.01] * 20, [0.012] * 10]
    assert burst_note(even) is None and zero_gap_share(even) == (0.0, 30)
    bursty = [[0.03, 0.0, 0.0, 0.01] * 5]  # two steps' events read together, then a long gap
    share, n = zero_gap_share(bursty)
    assert share == 0.5 and n == 20
    note = burst_note(bursty)
    assert note.startswith("50% of the 20 inter-token gaps are 0 s") and "mean ITL is not affected" in note
    assert burst_note([]) is None


def test_a_bench_result_with_bursts_says_so_in_its_notes(tmp_path):
    f = tmp_path / "bench.json"
    n = 3
    f.write_text(json.dumps({"backend": "vllm", "input_lens": [100] * n, "output_lens": [5] * n,
                             "ttfts": [0.05] * n, "itls": [[0.02, 0.0, 0.0, 0.02]] * n,
                             "start_times": [0.0, 0.5, 1.0], "completed": n}))
    ing = read_run(f)
    assert any("inter-token gaps are 0 s" in x for x in ing.notes)


def test_a_replay_record_counts_the_gaps_of_finished_requests_only():
    # the same gaps the real ITL percentiles are taken from (and what `pdsim validate` counts on the
    # bench.json the replay writes): a request that failed mid-stream is not part of them
    from pdsim.ingest.bursts import record_gaps
    from pdsim.ingest.common import real_record

    rec = real_record("r", arrival_s=[0.0, 0.0], input_len=[8, 8], output_len=[4, 4],
                      token_times=[[0.1, 0.11, 0.12, 0.13], [0.1, 0.1, 0.1]], drop_reason=[None, "stream_error"],
                      meta={})
    assert zero_gap_share(record_gaps(rec)) == (0.0, 3)
