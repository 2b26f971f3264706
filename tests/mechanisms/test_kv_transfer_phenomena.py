"""KV transfer as a shared resource: the phenomena of small pages under load.

Public sources of the behaviour (DOMAIN.md s4):
- Mooncake transfer engine docs (kvcache-ai/Mooncake, docs/source/design/transfer-engine):
  a BatchTransfer is an array of requests, one per contiguous region; each GPU buffer has its
  preferred NICs (topology matrix) and requests are sliced over them.
- SGLang PR #7236 / Mooncake PR #499: per-page submission of DeepSeek-V3 10K at page 64 took
  650 ms, batched 60 ms: the posting cost per contiguous region is what small pages multiply.
- Mooncake issue #522 (and #826): a small ``--page-size`` collapses transfer throughput on a
  busy server; page size 64 fixes it.
- SGLang's paged allocator hands out a fresh pool's pages in order and reuses freed pages only
  after its free list runs out (kv/pool.py), so fragmentation needs a churned, full pool.

Llama-3.1-8B on H100, 1P1D (tests/builders.py), calibrated Mooncake batch transfer, 200
requests at 4 req/s. No constant is tuned here: the per-chunk cost and efficiency are the
profile's fitted values (test_kv_transfer_fit_roundtrip.py checks those against their points).
"""
from __future__ import annotations

import pdsim
from builders import resolve, scenario_dict
from pdsim.metrics.detectors import diagnose
from pdsim.metrics.results import Results
from pdsim.sim.kv.pool import KVPool, kv_runs
from pdsim.sim.transports.base import WorkRequestQueue
from pdsim.sim.world import World
from pdsim.workload import materialize


def loaded_1p1d(page: int, inp: tuple[int, int], out: tuple[int, int] = (256, 768), n: int = 200) -> dict:
    d = scenario_dict(cost_model="calibrated", slo={"ttft_ms": 500, "tpot_ms": 50},
                      transfer={"backend": "mooncake", "batched": True})
    for role in ("prefill", "decode"):
        d["cluster"][role][0]["engine"]["page_size"] = page
    d["workload"].update(num_requests=n, rate=4.0, input={"dist": "uniform", "min": inp[0], "max": inp[1]},
                         output={"dist": "uniform", "min": out[0], "max": out[1]})
    return d


def _ttft_and_transfer_ms(res) -> tuple[float, float]:
    df = res.requests
    f = df[df["finished"]]
    return float(f["ttft_s"].mean() * 1e3), float(f["transfer_s"].mean() * 1e3)


# ---- the mechanisms, in isolation ---------------------------------------------------------

def test_fresh_pool_hands_out_contiguous_runs_and_a_churned_one_fragments():
    pool = KVPool(capacity_tokens=10_000, page_size=1)
    assert pool.alloc(4000) and pool.last_runs == 1  # fresh: one run
    assert pool.alloc(4000) and pool.last_runs == 1
    pool.release(8000)
    assert pool.alloc(4000) and pool.last_runs == 1  # empty again: the merge sorts it whole
    pool.release(4000)
    # churn: decode-style single pages fill the pool, half of them are freed again
    for _ in range(10_000):
        pool.alloc(1)
    pool.release(5000)
    assert pool.alloc(1000) and pool.last_runs == 1000  # holes of one page: every page a run
    # at page 64 the same tokens are 64x fewer pages and runs
    big = KVPool(capacity_tokens=10_000 * 64, page_size=64)
    for _ in range(10_000):
        big.alloc(1)
    big.release(5000)
    assert big.alloc(1000 // 64 + 1) and big.last_runs <= 16


def test_runs_break_where_either_end_breaks():
    class R:
        p_runs, d_runs = 3, 5
    assert kv_runs(R) == 7
    R.d_runs = 0  # a push transport: only P's side was counted
    assert kv_runs(R) == 3


def test_work_requests_of_one_sender_queue_fifo_and_senders_are_independent():
    q = WorkRequestQueue()
    ends = [q.reserve((0, 0), 0.0, 1.0) for _ in range(4)]
    assert ends == [1.0, 2.0, 3.0, 4.0]  # one sender: served one after another
    assert q.reserve((0, 1), 0.0, 1.0) == 1.0  # another DP rank's engine: its own queue
    assert q.reserve((1, 0), 0.5, 1.0) == 1.5  # another P instance
    assert q.reserve((0, 0), 10.0, 1.0) == 11.0  # idle again: no wait
    assert q.wait_s == 0.0 + 1.0 + 2.0 + 3.0
    assert q.busy_s == 7.0


def test_concurrent_transfers_from_one_prefill_gpu_serialise_their_work_requests():
    """16 prompts of 4096 tokens leave one P GPU from a fragmented pool (page 1: 4096 x 32
    layers x K/V = 262,144 work requests each). Their posting is one queue: the last transfer
    ends at least 16 postings after the first began, where per-request delays in parallel
    would end them all within about one posting of each other's start."""
    d = scenario_dict(cost_model="calibrated", transfer={"backend": "mooncake", "batched": True})
    for role in ("prefill", "decode"):
        d["cluster"][role][0]["engine"].update(page_size=1, chunked_prefill_size=65536)
    d["cluster"]["prefill"][0]["engine"]["max_prefill_tokens"] = 65536
    d["workload"] = {"kind": "fixed_batch", "batch_size": 16, "input": {"dist": "fixed", "value": 4096},
                     "output": {"dist": "fixed", "value": 1}}
    sc = resolve(d)
    world = World(sc, materialize(sc.scenario.workload, seed=0, base_dir=sc.base_dir))
    pool = next(i for i in world.instances if i.role == "prefill").pool
    n = pool.capacity  # churn P's pool: half of it held in scattered single pages
    for _ in range(n):
        pool.alloc(1)
    pool.release(n - n // 2)
    world.check = False
    res = Results(world.run(), sc)
    df = res.requests
    cal = sc.hardware.calibration["mooncake"]
    posting_s = 4096 * 32 * 2 * cal["per_chunk_us"] * 1e-6
    span = df["transfer_end_s"].max() - df["transfer_start_s"].min()
    assert span >= 16 * posting_s * 0.99, (span, posting_s)
    assert world.transport.wr.busy_s >= 16 * posting_s * 0.99


# ---- the phenomena in a loaded P/D run ------------------------------------------------------

def test_page_1_with_many_long_prompts_is_transfer_bound_and_the_verdict_fires():
    res = pdsim.simulate(resolve(loaded_1p1d(1, (6000, 10000))))
    ttft, xfer = _ttft_and_transfer_ms(res)
    assert xfer > 0.5 * ttft, (xfer, ttft)  # the transfer is most of TTFT
    kinds = [v.kind for v in diagnose(res)]
    assert "transfer_bound" in kinds, kinds


def test_ttft_rises_steeply_past_a_batch_times_input_threshold():
    """At page 1, doubling the prompt length roughly doubles TTFT below the threshold (prefill
    and bytes grow linearly) but multiplies it many times above it, once D's pool is full enough
    that its pre-allocations fragment into single pages (the collapse Mooncake #522 reports);
    likewise doubling the load from 1 to 2 req/s barely moves TTFT, from 2 to 4 req/s it
    multiplies it."""
    short = _ttft_and_transfer_ms(pdsim.simulate(resolve(loaded_1p1d(1, (2000, 3000)))))[0]
    mid = _ttft_and_transfer_ms(pdsim.simulate(resolve(loaded_1p1d(1, (4000, 6000)))))[0]
    long = _ttft_and_transfer_ms(pdsim.simulate(resolve(loaded_1p1d(1, (8000, 12000)))))[0]
    assert mid / short < 3.0, (short, mid)
    assert long / mid > 10.0, (mid, long)
    # the same along the other axis: the load (how many prompts are in flight at once)
    def at_rate(rate):
        d = loaded_1p1d(1, (6000, 10000))
        d["workload"]["rate"] = rate
        return _ttft_and_transfer_ms(pdsim.simulate(resolve(d)))[0]
    light, heavy = at_rate(1.0), at_rate(2.0)
    assert heavy / light < 1.5, (light, heavy)
    assert at_rate(4.0) / heavy > 10.0


def test_page_64_instead_of_1_changes_ttft_a_lot_under_load():
    one = pdsim.simulate(resolve(loaded_1p1d(1, (6000, 10000))))
    big = pdsim.simulate(resolve(loaded_1p1d(64, (6000, 10000))))
    (t1, x1), (t64, x64) = _ttft_and_transfer_ms(one), _ttft_and_transfer_ms(big)
    assert t1 > 5 * t64, (t1, t64)
    assert x1 > 50 * x64, (x1, x64)
    assert "transfer_bound" not in [v.kind for v in diagnose(big)]


def test_an_idle_server_does_not_care_about_the_page_size():
    """Light load, fresh pools: every prompt is one run whatever the page size, so the transfer
    is bandwidth-bound at both (the fitted 1P1D regime)."""
    light = {"num_requests": 20, "rate": 1.0}
    a = loaded_1p1d(1, (2000, 4000), n=20)
    b = loaded_1p1d(64, (2000, 4000), n=20)
    for d in (a, b):
        d["workload"].update(light)
    x1 = _ttft_and_transfer_ms(pdsim.simulate(resolve(a)))[1]
    x64 = _ttft_and_transfer_ms(pdsim.simulate(resolve(b)))[1]
    assert abs(x1 - x64) / x64 < 0.05, (x1, x64)
