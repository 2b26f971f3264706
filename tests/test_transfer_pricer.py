"""The per-pair transfer pricer (costs/transfer.py ``TransferPricer``) prices a request with the
formulas of the module docstring, written out here by hand, bit for bit, for every backend and
link; the simulator's pair plan (sim/build.py) reuses one pricer per transport spec."""
from __future__ import annotations

import math

import pytest

from pdsim.costs.transfer import (MOONCAKE_PER_PAGE_US, NVLINK_PER_CHUNK_US, NVLINK_SETUP_MS, TransferPricer,
                                  mooncake_constants, transfer_plan)
from pdsim.specs import catalog
from pdsim.specs.scenario import TransferSpec

DSV3 = catalog.load_model_ref("deepseek-v3")  # MLA: one copy, one sender, one part per layer
LLAMA = catalog.load_model_ref("llama-3.1-8b")  # GQA: K and V per layer, every TP rank sends
H800 = catalog.load_hardware_ref("h800")


@pytest.mark.parametrize("tokens,runs", [(1, None), (4096, None), (4097, 3), (10_000, 1), (300, 10_000)])
def test_mla_mooncake_batched_by_hand(tokens, runs):
    page, tp = 64, 4
    spec = TransferSpec(backend="mooncake", batched=True, setup_ms=2.5)
    plan = TransferPricer(DSV3, H800, spec, tp, page, calibrated=True).plan(tokens, runs=runs)
    pages = -(-tokens // page)
    n_runs = pages if runs is None else min(max(runs, 1), pages)
    chunks = n_runs * DSV3.num_layers
    serial = chunks * mooncake_constants(H800, True)["per_chunk_us"] * 1e-6
    assert plan.nbytes == float(tokens * DSV3.kv_bytes_per_token("bf16"))
    assert (plan.senders, plan.chunks, plan.link) == (1, chunks, "rdma")
    assert plan.serial_s == serial and plan.fixed_s == 2.5 * 1e-3 + serial


def test_gqa_per_page_nccl_and_nvlink_by_hand():
    tokens, page, tp = 5000, 16, 2
    per_tok = LLAMA.kv_bytes_per_token("bf16") * LLAMA.kv_replication(tp)
    chunks = -(-tokens // page) * LLAMA.num_layers * 2  # K and V, every page its own run
    per_page = TransferPricer(LLAMA, H800, TransferSpec(backend="mooncake", batched=False), tp, page).plan(tokens)
    assert per_page.nbytes == float(tokens * per_tok) and per_page.senders == tp and per_page.chunks == chunks
    assert per_page.serial_s == chunks * (MOONCAKE_PER_PAGE_US * 1e-6)
    nccl = TransferPricer(LLAMA, H800, TransferSpec(backend="nccl", mode="put"), tp, page).plan(tokens)
    assert nccl.fixed_s == 0.0 + LLAMA.num_layers * H800.efficiency.p2p_latency_us * 1e-6 and nccl.serial_s == 0.0
    nvl = TransferPricer(LLAMA, H800, TransferSpec(), tp, page, link="nvlink", dst_attn_tp=8).plan(tokens)
    split = min(8, max(LLAMA.num_kv_heads, tp)) // tp
    assert nvl.chunks == chunks * split and nvl.link == "nvlink"
    assert nvl.fixed_s == NVLINK_SETUP_MS * 1e-3 + nvl.chunks * NVLINK_PER_CHUNK_US * 1e-6
    assert TransferPricer(LLAMA, H800, TransferSpec(), tp, page).plan(0).chunks == 0


def test_transfer_plan_is_the_pricer_and_run_pages_apply():
    spec = TransferSpec(backend="mooncake", batched=True)
    for tokens in (1, 777, 65_536):
        a = transfer_plan(DSV3, H800, spec, tokens, 1, 1, calibrated=True, run_pages=64)
        b = TransferPricer(DSV3, H800, spec, 1, 1, calibrated=True).plan(tokens, run_pages=64)
        assert a == b and a.chunks == math.ceil(tokens / 64) * DSV3.num_layers
