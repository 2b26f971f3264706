"""Prefix structure survives recording (issue 24, item 2): `pdsim replay` records each prompt as
vLLM-style chained block hashes, the readers carry them, `pdsim validate` simulates the hits."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from pdsim import api
from pdsim.ingest import read_run
from pdsim.metrics.results import Results
from pdsim.validate.align import simulate_aligned
from pdsim.validate.prefix import NOT_CARRIED, with_prefix
from pdsim.workload.prefix_hashes import block_hashes, hashes_of_logged_ids, reblock, repeat_share
from pdsim.workload.table import RequestTable

from builders import REPO

SCENARIO = REPO / "workloads/scenarios/cpu-vllm-tiny-llama.yaml"  # page_size 128


def test_chained_hashes_share_exactly_the_common_full_blocks():
    a = list(range(100))
    b = list(range(40)) + [999] + list(range(41, 100))  # differs inside block 2 (tokens 32..47)
    ha, hb = block_hashes(a, 16, 0), block_hashes(b, 16, 1)
    assert len(ha) == 7  # ceil(100 / 16)
    assert ha[:2] == hb[:2] and ha[2] != hb[2]
    assert ha[3:6] != hb[3:6]  # chained: equal later tokens after a difference do not match
    # the partial last block is each request's own, even for identical prompts (vLLM never caches it)
    assert block_hashes(a, 16, 0)[:6] == block_hashes(a, 16, 5)[:6]
    assert block_hashes(a, 16, 0)[6] != block_hashes(a, 16, 5)[6]
    # re-blocked to 32 tokens: a coarse block is shared when all its fine blocks are
    ra, rb = reblock(ha, 16, 32, 100, 0), reblock(hb, 16, 32, 100, 1)
    assert len(ra) == 4 and ra[0] == rb[0] and ra[1] != rb[1]
    assert repeat_share([ha, hb]) == pytest.approx(2 / 14)
    with pytest.raises(ValueError, match="not a multiple"):
        reblock(ha, 16, 24, 100, 0)
    assert hashes_of_logged_ids(["1, 2, 3", "1, 2, 4"], 2)["prompt_hash_ids"][0][0] == block_hashes([1, 2], 2, 0)[0]
    assert hashes_of_logged_ids(["1, 2, ..."], 2) == {}  # a truncated log carries nothing


def test_replay_records_hashes_and_validate_simulates_the_hits(tmp_path):
    pytest.importorskip("aiohttp")
    import test_replay as tr
    from pdsim.replay import ReplayConfig, replay, write_run_outputs

    # four requests of a 256-token shared system prompt (two 128-token blocks) + their own tail
    n = 4
    hids = [np.array([1, 2, 10 + i, 20 + i]) for i in range(n)]
    table = RequestTable(np.arange(n) * 0.02, np.full(n, 500), np.full(n, 3), hash_ids=hids, block_size=128,
                         source="test")
    with tr.FakeServer() as srv:
        rec = replay(table, ReplayConfig(srv.url), name="prefix", hash_block=128)
    got = rec.meta["prompt_hash_ids"]
    assert rec.meta["prompt_hash_block_size"] == 128 and [len(h) for h in got] == [4] * n
    assert len({h[0] for h in got}) == 1 and len({h[1] for h in got}) == 1  # the shared blocks
    assert len({h[2] for h in got}) == n  # each request's own blocks
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        write_run_outputs(Results(rec), tmp_path, "csv", report=False, bench_json=True)
    back = read_run(tmp_path)
    assert back.record.meta["prompt_hash_ids"] == got
    sc = api.load_scenario(SCENARIO)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        al = simulate_aligned(back.record, sc)
        hit = al.sim.summary()["prefix_cache_hit_rate"]
    # 6 of the 16 blocks repeat an earlier request's
    assert al.prefix_note.startswith("prefix structure: carried from prompt token ids (128-token block hashes; 38%")
    assert hit == pytest.approx(3 * 256 / 2000, abs=0.01)  # requests 2-4 find the 256-token shared prefix


def test_a_file_without_prompts_says_so_and_malformed_hashes_are_not_used():
    sc = api.load_scenario(SCENARIO)
    table = RequestTable(np.zeros(2), np.array([200, 300]), np.array([4, 4]), source="t")
    order = np.arange(2)
    t, note = with_prefix(table, {}, order, sc)
    assert t.hash_ids is None and note == NOT_CARRIED
    t, note = with_prefix(table, {"prompt_hash_ids": [[1], "x"], "prompt_hash_block_size": 16}, order, sc)
    assert t.hash_ids is None and "malformed" in note
    # 16-token hashes re-blocked to the scenario's 128-token pages
    meta = {"prompt_hash_ids": [block_hashes(range(200), 16, 0), block_hashes(range(300), 16, 1)],
            "prompt_hash_block_size": 16}
    t, note = with_prefix(table, meta, order, sc)
    assert t.block_size == 128 and [len(h) for h in t.hash_ids] == [2, 3] and t.hash_ids[0][0] == t.hash_ids[1][0]
    assert "re-blocked to 128" in note


def test_aiperf_conversations_carry_their_chat_history_as_shared_blocks(tmp_path):
    """Two conversations of three turns: each turn's prompt = the previous turn's prompt + answer +
    a new message; a third conversation whose second turn is shorter does not extend its first."""
    import json

    rows, t = [], 0
    plan = {"a": [300, 300 + 64 + 100, 300 + 64 + 100 + 64 + 80], "b": [500, 500 + 64 + 40, 500 + 64 + 40 + 64 + 90],
            "c": [400, 200]}
    for conv, isls in plan.items():
        for k, isl in enumerate(isls):
            t += 1
            rows.append({"metadata": {"conversation_id": conv, "turn_index": k, "request_start_ns": t * 100_000_000,
                                      "benchmark_phase": "profiling", "was_cancelled": False},
                         "metrics": {"time_to_first_token": {"value": 40.0, "unit": "ms"},
                                     "request_latency": {"value": 400.0, "unit": "ms"},
                                     "input_sequence_length": {"value": isl, "unit": "tokens"},
                                     "output_sequence_length": {"value": 64, "unit": "tokens"}}, "error": None})
    f = tmp_path / "profile_export.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    meta = read_run(f).record.meta
    h = meta["prompt_hash_ids"]
    assert meta["prompt_hash_source"].startswith("conversation ids (4 turns extend their previous turn")
    a0, a1, a2 = h[0], h[1], h[2]
    assert a1[:300 // 16] == a0[:300 // 16] and a2[:len(a1) - 1] == a1[:-1]  # history blocks shared
    assert a0[-1] != a1[300 // 16]  # the first turn's partial block is its own
    c0, c1 = h[6], h[7]
    assert not set(c0) & set(c1)  # a shorter second turn is not history: nothing shared
    sc = api.load_scenario(SCENARIO)
    table = RequestTable(np.arange(8) * 0.1, np.array([x for v in plan.values() for x in v]), np.full(8, 64),
                         source="t")
    t2, note = with_prefix(table, meta, np.arange(8), sc)
    assert note.startswith("prefix structure: carried from conversation ids") and "re-blocked to 128" in note
    assert t2.hash_ids[1][:2].tolist() == t2.hash_ids[0][:2].tolist()  # 256 of turn 1's 300 tokens hit
