"""KV memory hierarchy: prefix cache, offload tiers, receive buffers, transfer modes."""
from __future__ import annotations


import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import pdsim
from pdsim.metrics import Results
from pdsim.sim.world import World
from pdsim.sim.kv.tiers import LRU, Tier
from pdsim.specs.storage import StorageDevice
from pdsim.workload import RequestTable

from builders import resolve, scenario_dict


def run_table(d: dict, table: RequestTable) -> Results:
    sc = resolve(d)
    return Results(World(sc, table).run(), sc)


def repeated_prompts(n_prompts: int, repeats: int, tokens: int, gap_s: float, out: int = 8, block: int = 512):
    """Each of ``n_prompts`` distinct prompts sent ``repeats`` times, round after round."""
    arr, inp, outl, hashes = [], [], [], []
    nb = -(-tokens // block)
    t = 0.0
    for _r in range(repeats):
        for p in range(n_prompts):
            arr.append(t)
            inp.append(tokens)
            outl.append(out)
            hashes.append(np.arange(p * nb, (p + 1) * nb, dtype=np.int64))
            t += gap_s
    return RequestTable(np.array(arr), np.array(inp), np.array(outl), hash_ids=hashes, block_size=block)


def colocated(**engine) -> dict:
    d = scenario_dict("colocated")
    d["cluster"]["colocated"][0]["engine"].update(engine)
    return d


# ---- prefix cache -------------------------------------------------------------------------
def test_repeated_prompt_hits_the_prefix_cache():
    res = run_table(colocated(), repeated_prompts(1, 3, 4096, 5.0))
    df = res.requests
    assert df.loc[0, "cached_tokens"] == 0
    # 4096 tokens = 8 blocks; at most 7 reused so at least one token is computed
    assert (df.loc[1:, "cached_tokens"] == 7 * 512).all()
    assert (df.loc[1:, "prefill_s"] < df.loc[0, "prefill_s"]).all()
    assert res.summary()["prefix_cache_hit_rate"] > 0.4


def test_disable_radix_cache_is_honoured():
    res = run_table(colocated(disable_radix_cache=True), repeated_prompts(1, 3, 4096, 5.0))
    assert (res.requests["cached_tokens"] == 0).all()


def test_cache_aware_router_sends_repeats_to_the_same_prefill():
    d = scenario_dict()
    d["cluster"]["prefill"][0]["count"] = 3
    d["router"] = {"policy": "cache_aware"}
    res = run_table(d, repeated_prompts(2, 4, 2048, 2.0))
    df = res.requests
    for p in (0, 1):
        assert df.loc[df.index % 2 == p, "prefill_instance"].nunique() == 1
    assert df["cached_tokens"].sum() > 0


# ---- offload tiers ------------------------------------------------------------------------
def offload(tiers, **extra):
    return {"tiers": tiers, **extra}


def small_hbm_offload(tiers, policy="cheaper"):
    # HBM holds ~2 prompts of 8k tokens; 6 distinct prompts cycle, so hits must come from below
    d = colocated(max_total_tokens=20_000, min_kv_reserve_tokens=1024)
    d["kv_offload"] = offload(tiers, load_policy=policy)
    return d


def test_evicted_blocks_are_loaded_back_from_dram():
    d = small_hbm_offload([{"device": "host-dram-pcie5"}], policy="load")
    res = run_table(d, repeated_prompts(6, 3, 8192, 3.0))
    df = res.requests
    later = df.iloc[6:]
    assert (later["loaded_tokens"] > 0).all() and (later["kv_load_s"] > 0).all()
    s = res.summary()
    assert s["offload_loaded_tokens"] > 0 and s["tiers"][0]["bytes_read"] > 0


def test_load_policy_recompute_never_loads():
    d = small_hbm_offload([{"device": "host-dram-pcie5"}], policy="recompute")
    res = run_table(d, repeated_prompts(6, 3, 8192, 3.0))
    assert res.requests["loaded_tokens"].sum() == 0


def test_dram_overflow_spills_to_ssd_and_reads_come_from_disk():
    tiers = [{"device": "host-dram-pcie5", "capacity_gib": 2.0}, {"device": "local-nvme-gen4"}]
    d = small_hbm_offload(tiers, policy="load")
    res = run_table(d, repeated_prompts(8, 3, 8192, 3.0))
    st = {t["tier"].split(".")[-1]: t for t in res.summary()["tiers"]}
    assert st["local-nvme-gen4"]["bytes_written"] > 0 and st["local-nvme-gen4"]["bytes_read"] > 0


def test_tier_bytes_conserved_and_capacity_respected():
    tiers = [{"device": "host-dram-pcie5", "capacity_gib": 1.0}, {"device": "local-nvme-gen4", "capacity_gib": 2.0}]
    d = small_hbm_offload(tiers, policy="load")
    res = run_table(d, repeated_prompts(10, 3, 8192, 1.0))
    for t in res.summary()["tiers"]:
        assert abs(t["bytes_written"] - (t["resident_bytes"] + t["bytes_evicted"])) < 1.0
        assert t["resident_bytes"] <= t["capacity_bytes"]
    tl = res.timeline
    tiers_tl = tl[tl["kind"] == "tier"]
    assert len(tiers_tl) and (tiers_tl["tier_used_frac"] <= 1.0 + 1e-12).all()


def _lru_hits(capacity_blocks: int, seq: list[int]) -> int:
    dev = StorageDevice(kind="host_dram", capacity_gib=1, read_gbps=1, write_gbps=1, latency_us=0, source="test")
    tier = Tier("t", dev, float(capacity_blocks), LRU())
    hits = 0
    for k in seq:
        if k in tier:
            tier.load([k], 0.0)
            hits += 1
        else:
            tier.store(k, 1.0, 0.0)
    return hits


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 30), max_size=200), st.integers(1, 20), st.integers(1, 10))
def test_larger_lru_tier_never_lowers_the_hit_rate(seq, cap, extra):
    assert _lru_hits(cap + extra, seq) >= _lru_hits(cap, seq)


# ---- transfer modes and receive buffers ---------------------------------------------------
def two_requests(tokens=2048, out=4):
    return RequestTable(np.zeros(2), np.array([tokens, tokens]), np.array([out, out]))


def nccl(mode, **transfer):
    d = scenario_dict()
    d["transfer"] = {"backend": "nccl", "mode": mode, **transfer}
    d["cluster"]["prefill"][0]["engine"].update(max_running_requests=1)  # one prompt per P step
    return d


def test_put_blocks_the_prefill_loop_until_sent():
    df = run_table(nccl("put", kv_buffer_fraction=0.05), two_requests()).requests
    assert df.loc[1, "prefill_start_s"] >= df.loc[0, "transfer_end_s"] - 1e-12
    assert df.loc[0, "transfer_end_s"] > df.loc[0, "prefill_end_s"]


def test_put_async_does_not_block():
    df = run_table(nccl("put_async", kv_buffer_fraction=0.05), two_requests()).requests
    assert abs(df.loc[1, "prefill_start_s"] - df.loc[0, "prefill_end_s"]) < 1e-12
    assert df.loc[1, "prefill_start_s"] < df.loc[0, "transfer_end_s"]


def test_get_waits_for_decode_room():
    d = nccl("get")
    # D's pool fits one 2048-token request (+ growth), not two
    d["cluster"]["decode"][0]["engine"].update(max_total_tokens=3000, min_kv_reserve_tokens=1024)
    df = run_table(d, two_requests(out=50)).requests
    assert df.loc[1, "transfer_start_s"] >= df.loc[0, "finish_s"] - 1e-12
    assert df.loc[1, "transfer_start_s"] > df.loc[1, "prefill_end_s"]


def test_full_buffers_spill_to_host_then_lose_kv_which_is_recomputed():
    # one 1024-token Llama-8B KV is 134 MB: the GPU buffer holds one, the host pool one more
    d = nccl("put_async", kv_buffer_fraction=0.002, host_pool_gib=0.15)
    d["cluster"]["prefill"][0]["engine"].update(max_running_requests=None)
    d["cluster"]["decode"][0]["engine"].update(max_running_requests=1)
    n = 12
    table = RequestTable(np.zeros(n), np.full(n, 1024), np.full(n, 64))
    res = run_table(d, table)
    df = res.requests
    buf = res.summary()["receive_buffers"]["D0"]
    assert df["finished"].all()  # a lost KV is recomputed, never dropped
    assert buf["lost_requests"] > 0 and df["recomputes"].sum() == buf["lost_requests"]
    assert buf["host_written_bytes"] > 0 and (df["d_load_s"] > 0).any()
    assert abs(buf["written_bytes"] - (buf["read_bytes"] + buf["resident_bytes"])) < 1.0
    # bytes offered = written + lost
    assert abs(df["transfer_bytes"].sum() - buf["written_bytes"] - buf["lost_bytes"]) < 1.0


def test_mooncake_rejects_put_modes():
    d = scenario_dict()
    d["transfer"] = {"backend": "mooncake", "mode": "put"}
    try:
        resolve(d)
    except pdsim.SpecError as err:
        assert "transfer.mode" in str(err)
    else:  # pragma: no cover
        raise AssertionError("expected a SpecError")


def test_get_is_a_pull_and_mooncake_preallocates():
    """GET: D allocates a request's pages only after P has prefilled it (D asks P when it has
    room); Mooncake/SGLang: D pre-allocates while P prefills."""
    get = run_table(nccl("get"), two_requests(out=20)).requests
    assert (get["decode_alloc_s"] >= get["prefill_end_s"]).all()
    moon = run_table(scenario_dict(), two_requests(out=20)).requests
    assert (moon["decode_alloc_s"] < moon["prefill_end_s"]).all()
