"""What-ifs on vLLM's CPU engine, recorded on the Zen 1 host on 2026-11-28 (validation/cpu-vllm-zen1e-*):
the same requests and send times through another engine setting or deployment, every case against
the profile re-measured on the host just before (validation/cpu-vllm-calibration/zen1e), fitted on no
recording. Long prompts (1,536-3,584 tokens in 3-7 chunks of the 512-token step budget) colocated, at a
2,048-token budget and through 1P1D; the scenario's workload at its knee with at most 4 requests
running instead of 32. These tests hold the figures validation/README.md quotes ("Long prompts,
colocated and 1P1D, ...")."""
from __future__ import annotations

import pytest

from pdsim.validate.case import run_case

from builders import REPO

GATED = ("mean_ttft_ms", "p90_ttft_ms", "mean_itl_ms", "p90_itl_ms")


def _rows(case: str) -> dict[str, tuple[float, float]]:
    """metric -> (real, simulated), as `pdsim validate` computes them."""
    res = run_case(REPO / "validation" / case)
    assert res.passed, case
    return {r.metric: (r.real, r.simulated) for r in res.rows if r.metric in GATED}


@pytest.fixture(scope="module")
def rows():
    return {c: _rows(f"cpu-vllm-zen1e-{c}") for c in ("long-knee", "long-repeat-knee", "long-budget2048-knee",
                                                      "long-pd-knee", "knee", "seqs4-knee")}


def test_a_larger_step_budget_moves_ttft_and_the_itl_tail_as_the_engine_did(rows):
    """The --chunked-prefill-size what-if on the same requests and send times: from 512 to 2,048
    tokens a step, prompts take 1-2 steps of ~3.6 s instead of 3-7 of ~0.9 s. Fewer than a tenth of
    the decodes' gaps are then stalled by a chunk, so the engine's p90 ITL fell from 973 to 48 ms
    while the stalled time, and so the mean ITL, stayed (+1.9%); its mean TTFT rose 6.3%. pdsim,
    pricing the same steps, gives 961 to 51 ms, +1.9% and +4.5%. The engine's own spread is far
    smaller: the same 512-token run repeated on a fresh server moved its mean TTFT 1.0%."""
    small, big = rows["long-knee"], rows["long-budget2048-knee"]
    again = rows["long-repeat-knee"]
    assert again["mean_ttft_ms"][0] == pytest.approx(small["mean_ttft_ms"][0], rel=0.02)
    assert again["p90_itl_ms"][0] == pytest.approx(small["p90_itl_ms"][0], rel=0.02)
    for side in (0, 1):  # real, then simulated
        assert big["p90_itl_ms"][side] < small["p90_itl_ms"][side] / 10
        assert 1.0 < big["mean_itl_ms"][side] / small["mean_itl_ms"][side] < 1.05
        assert 1.02 < big["mean_ttft_ms"][side] / small["mean_ttft_ms"][side] < 1.08
    real = big["mean_ttft_ms"][0] / small["mean_ttft_ms"][0]
    sim = big["mean_ttft_ms"][1] / small["mean_ttft_ms"][1]
    assert sim == pytest.approx(real, abs=0.03)


def test_disaggregation_cuts_the_itl_tail_and_adds_ttft(rows):
    """At about the same rate (0.167 and 0.174 req/s), colocated decodes share their steps with
    0.9 s chunks (p90 ITL 973 ms) while 1P1D's D carries no prefill (20.4 ms), and 1P1D's mean
    TTFT is 17% longer (whole prompts on P, the files hand-off, D's first step). pdsim gives both
    sides (the hardware differs: one worker core colocated, one each for P and D)."""
    co, pd = rows["long-knee"], rows["long-pd-knee"]
    for side in (0, 1):
        assert co["p90_itl_ms"][side] > 20 * pd["p90_itl_ms"][side]
        assert pd["mean_ttft_ms"][side] > 1.1 * co["mean_ttft_ms"][side]


def test_fewer_running_requests_trade_ttft_for_itl_as_the_engine_did(rows):
    """The --max-running-requests what-if (vLLM's --max-num-seqs) on the knee's 60 requests: from 32
    to 4 running at once, requests queue for a place (mean TTFT 1,457 -> 2,151 ms, +48%; p90 +52%)
    and the decode batches shrink (mean ITL 25.0 -> 20.6 ms, -18%; p90 26.4 -> 16.0 ms, -39%). pdsim
    predicted, before the run (the zen1e-knee case with max_running_requests=4), +36% / +38% TTFT and
    -25% / -42% ITL: every move's direction, the TTFT's rise three quarters of the engine's (its decode
    steps ran at 1.07 of their price in this run, 1.00 in the 32-request one)."""
    wide, narrow = rows["knee"], rows["seqs4-knee"]
    for side in (0, 1):
        assert narrow["mean_ttft_ms"][side] > 1.3 * wide["mean_ttft_ms"][side]
        assert narrow["p90_ttft_ms"][side] > 1.3 * wide["p90_ttft_ms"][side]
        assert narrow["mean_itl_ms"][side] < 0.85 * wide["mean_itl_ms"][side]
        assert narrow["p90_itl_ms"][side] < 0.7 * wide["p90_itl_ms"][side]
