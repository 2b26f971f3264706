"""A D that computes more of a handed-off prompt than one step's prefill budget (issue 24 item 5,
sim/engine/handoff_recompute.py): vLLM's shared-storage hand-off leaves D the whole prompt when its
lookup misses P's files (L - 1 a whole number of pages); D's scheduler runs that recompute as an
ordinary chunked prefill under its token budget, beside its running decodes, and samples the first
token at the end of the last chunk. A tail that fits in one step is priced as before."""
from __future__ import annotations

import numpy as np
import pytest

from pdsim import api
from pdsim.costs.shared_storage import loaded_tokens
from pdsim.sim.engine import handoff_recompute
from pdsim.workload.table import RequestTable

from builders import REPO

PD = REPO / "workloads/scenarios/cpu-vllm-tiny-llama-1p1d.yaml"  # D: 512-token budget, mixed chunks
PAGE = 128
PLACED = ["host.unpinned={}", "host.pollers={}", "overheads.router_ms=0"]  # P's worker on core 0, D's on core 1, idle host
NO_HOST = PLACED + ["host.cores=0", "host.placement={}"]
MISS = 15 * PAGE + 1  # L - 1 is 15 whole pages: D's lookup misses, it computes all 1921 tokens


def _run(sets, inputs, arrivals, outputs):
    table = RequestTable(np.asarray(arrivals, float), np.asarray(inputs), np.asarray(outputs), source="t")
    return api.simulate(api.load_scenario(PD, sets), table=table)


def _d_steps(res) -> dict:
    return [{k: np.asarray(v) for k, v in st.items()} for inst, st in zip(res.record.instances, res.record.steps)
            if inst.role == "decode"][0]


def _one_step_recompute(monkeypatch) -> None:
    """The pricing before chunking: every tail, however long, in D's next step."""
    monkeypatch.setattr(handoff_recompute, "prefill_room", lambda inst: 1 << 40)


def test_the_alignment_makes_this_prompt_a_whole_miss():
    assert loaded_tokens(MISS, PAGE) == 0
    assert loaded_tokens(MISS + 1, PAGE) == 15 * PAGE


@pytest.mark.parametrize("sets", [NO_HOST, PLACED], ids=["no-host", "placed"])
def test_a_whole_prompt_miss_is_four_chunks_beside_the_running_decodes(sets, monkeypatch):
    # A decodes on D; B's 1921 tokens reach D meanwhile: with one decode running the budget leaves
    # 511 tokens a step, so 511 + 511 + 511 + 388 in four steps, each with A's decode
    inputs, arrivals, outputs = (300, MISS), (0.0, 0.5), (1000, 5)
    res = _run(sets, inputs, arrivals, outputs)
    r = res.requests
    d = _d_steps(res)
    pf = np.flatnonzero(d["prefill_tokens"])
    assert d["prefill_tokens"][pf].tolist() == [511, 511, 511, 388]
    assert np.diff(pf).tolist() == [1, 1, 1]  # consecutive steps
    assert d["running_batch"][pf].tolist() == [1, 1, 1, 1]  # A decoded in each
    start = d["time_s"][pf]
    dur = d["step_s"][pf]
    # B is admitted at the first chunk's start (no file to read: the step holds nothing) and its
    # first token is the last chunk's end (router_ms=0: no way out)
    assert float(r["decode_admit_s"][1]) == pytest.approx(float(start[0]), abs=1e-12)
    assert float(r["d_load_s"][1]) == 0.0
    assert float(r["first_token_s"][1]) == pytest.approx(float(start[-1] + dur[-1]), rel=1e-12)
    # A got a token at every chunk's end: its longest gap is one chunk's step, not the whole prompt
    assert float(r["itl_max_s"][0]) == pytest.approx(float(dur.max()), rel=1e-9)
    assert float(r["itl_max_s"][0]) < 0.5 * float(dur.sum())
    # before: one step computed the whole prompt and held A's decode for all of it
    _one_step_recompute(monkeypatch)
    old = _run(sets, inputs, arrivals, outputs).requests
    assert float(old["itl_max_s"][0]) > 0.9 * float(dur.sum())
    assert not _d_steps(_run(sets, inputs, arrivals, outputs))["prefill_tokens"].any()


def test_a_tail_past_a_smaller_budget_is_chunked_too():
    # the threshold is D's budget, not the page: a 100-token tail (two pages loaded) under a 64-token
    # budget, nothing else running, is two chunks
    sets = NO_HOST + ["cluster.decode[0].engine.chunked_prefill_size=64",
                      "cluster.decode[0].engine.max_prefill_tokens=64"]
    assert loaded_tokens(356, PAGE) == 2 * PAGE
    res = _run(sets, (356,), (0.0,), (10,))
    d = _d_steps(res)
    pf = np.flatnonzero(d["prefill_tokens"])
    assert d["prefill_tokens"][pf].tolist() == [64, 36]
    # the file read (two pages) holds the first chunk's step, as it held the tail's step before
    assert float(res.requests["d_load_s"][0]) > 0
    assert float(d["time_s"][pf[-1]] + d["step_s"][pf[-1]]) == pytest.approx(float(res.requests["first_token_s"][0]))


def _mixed(n: int, seed: int, miss_every: int = 0):
    rng = np.random.default_rng(seed)
    inputs = rng.integers(130, 1000, n)
    inputs[(inputs - 1) % PAGE == 0] += 1  # no miss unless asked
    if miss_every:
        inputs[::miss_every] = rng.choice([5, 7, 9], len(inputs[::miss_every])) * PAGE + 1
    return inputs, np.sort(rng.uniform(0, 3, n)), rng.integers(5, 60, n)


@pytest.mark.parametrize("sets", [NO_HOST, PLACED + ["host.background=0.6"]], ids=["no-host", "placed-loaded"])
def test_tails_within_one_chunk_are_priced_exactly_as_before(sets, monkeypatch):
    # no prompt leaves D more than its budget: the same run as with every tail in one step, bit for bit
    args = _mixed(24, 3)
    new = _run(sets, *args)
    _one_step_recompute(monkeypatch)
    old = _run(sets, *args)
    for col in ("decode_admit_s", "first_token_s", "finish_s", "d_load_s", "itl_max_s"):
        assert np.asarray(new.requests[col]).tolist() == np.asarray(old.requests[col]).tolist(), col
    assert not _d_steps(new)["prefill_tokens"].any()  # every tail rode in D's decode steps


def test_deterministic_with_whole_prompt_misses():
    sets = PLACED + ["host.background=0.6"]
    args = _mixed(24, 4, miss_every=4)
    a, b = _run(sets, *args), _run(sets, *args)
    for col in ("decode_admit_s", "first_token_s", "finish_s", "itl_max_s"):
        assert np.asarray(a.requests[col]).tolist() == np.asarray(b.requests[col]).tolist(), col
    assert int(_d_steps(a)["prefill_tokens"].sum()) == int(sum(args[0][::4]))  # the misses (> 512 tokens), all chunked on D


@pytest.mark.parametrize("sets", [NO_HOST, PLACED], ids=["no-host", "placed"])
def test_a_d_failure_mid_recompute_loses_no_request(sets, monkeypatch):
    # D fails between B's second and third chunk: B (and A, decoding there) are handed back to the
    # world, sent again, and finish; every page, queue and batch is empty at the end (PDSIM_CHECK)
    monkeypatch.setenv("PDSIM_CHECK", "1")
    inputs, arrivals, outputs = (300, MISS, 500), (0.0, 0.5, 0.6), (1000, 5, 20)
    first = _run(sets, inputs, arrivals, outputs)
    d = _d_steps(first)
    pf = np.flatnonzero(d["prefill_tokens"])
    at = float(d["time_s"][pf[2]]) + 0.5 * float(d["step_s"][pf[2]])  # inside the third chunk
    assert float(first.requests["first_token_s"][1]) > at
    fault = f"faults={{events: [{{at_s: {at!r}, kill: gpu, instance: D0, recover_after_s: 0.2}}]}}"
    res = _run(sets + [fault], inputs, arrivals, outputs)
    r = res.requests
    assert r["drop_reason"].isna().all()
    assert r["finish_s"].notna().all()
    assert int(r["retries"][1]) == 1  # B was lost with D and sent again
    # its second attempt computed the whole prompt again, in chunks, after the restart
    d = _d_steps(res)
    later = d["time_s"] > at
    assert int(d["prefill_tokens"][later].sum()) >= MISS
