"""Fit and simulation are one model: the points ``calibration.mooncake`` was fitted on come back
through the whole transport path of a 1P1D world (router, D's pre-allocation, P's prefill,
the sender's work-request queue, the fabric flow), within the uncertainty the profile states.

Sources of the figures (calibration/data/mooncake_transfer.csv, kv_transfer_chunks.csv):
- H800, Qwen3-8B TP8 1P1D, 8x CX-7 400 Gb/s, concurrency 1: Mooncake docs,
  docs/source/performance/vllm/vllm-v1-pd-performance.md (kvcache-ai/Mooncake); DOMAIN.md s4.
- H20-3e, Qwen3-235B-A22B TP8 1P1D, 4x 400 GbE: Mooncake docs,
  docs/source/performance/sglang/sglang-benchmark-results-v1.md; DOMAIN.md s4.
- DeepSeek-V3 10K prompt, page 64, 3P9D under load, batch transfer 60 ms: SGLang PR #7236 /
  Mooncake PR #499 (DOMAIN.md s4).
"""
from __future__ import annotations

import numpy as np
import pytest
import yaml

import pdsim
from pdsim.calibrate import data
from pdsim.metrics.results import Results
from pdsim.sim.world import World
from pdsim.specs.catalog import load_hardware_ref
from pdsim.workload import materialize

from builders import REPO

# Qwen/Qwen3-8B config.json (DOMAIN.md s5: 147,456 B/token of BF16 KV); not a bundled model
QWEN3_8B = {"name": "qwen3-8b", "source": "Qwen/Qwen3-8B config.json", "num_layers": 36, "hidden": 4096,
            "vocab": 151936, "num_heads": 32, "num_kv_heads": 8, "head_dim": 128, "attention": "gqa",
            "ffn": 12288, "weight_dtype": "bf16", "kv_dtype": "bf16", "max_context": 40960}


def one_transfer_world(hardware: str, model: str, tokens: int, page: int = 64, group: dict | None = None) -> dict:
    """1P1D, one request of ``tokens`` prompt tokens, calibrated Mooncake batch transfer."""
    eng = {"page_size": page, "chunked_prefill_size": 65536, "max_prefill_tokens": 65536}
    g = dict(group or {"gpus": 8})
    return {"name": "fit-roundtrip", "hardware": hardware, "model": model, "cost_model": "calibrated",
            "cluster": {"prefill": [{"count": 1, **g, "engine": dict(eng)}],
                        "decode": [{"count": 1, **g, "engine": dict(eng)}]},
            "transfer": {"backend": "mooncake", "batched": True},
            "workload": {"kind": "fixed_batch", "batch_size": 1, "input": {"dist": "fixed", "value": tokens},
                         "output": {"dist": "fixed", "value": 1}},
            "seed": 0}


def transfer_ms(d: dict, churn_prefill_pool: bool = False) -> float:
    sc = pdsim.resolve_scenario(d, "<test>", REPO / "workloads" / "scenarios")
    table = materialize(sc.scenario.workload, seed=0, base_dir=sc.base_dir)
    world = World(sc, table)
    if churn_prefill_pool:
        # a loaded server: other requests' KV holds half of P's pool in scattered single pages
        # (fill it page by page, then free half), so every page of this prompt is its own run
        pool = next(i for i in world.instances if i.role == "prefill").pool
        n = pool.capacity
        for _ in range(n):
            pool.alloc(1)
        pool.release(n - n // 2)
        world.check = False  # the background pages stay in use: not a leak of this run
    res = Results(world.run(), sc)
    df = res.requests
    assert len(df) == 1 and bool(df["finished"].iloc[0])
    return float(df["transfer_s"].iloc[0]) * 1e3


def _single_rows(hw: str):
    rows = data.load("mooncake_transfer")
    return rows[(rows["hardware"] == hw) & (rows["regime"] == "single") & rows["use"]]


@pytest.mark.parametrize("hw,model", [("h800", "qwen3-8b"), ("h20-3e", "qwen3-235b-a22b")])
def test_fitted_single_transfers_come_back_through_the_world(hw, model, tmp_path):
    """Every 1P1D row the fit used: the mean |error| of the simulated transfer is within the
    profile's ``rel_uncertainty`` (the fit's held-out error) and no row is off by more than twice it."""
    if model == "qwen3-8b":
        path = tmp_path / "qwen3-8b.yaml"
        path.write_text(yaml.safe_dump(QWEN3_8B))
        model = str(path)
    u = load_hardware_ref(hw).calibration["mooncake"]["rel_uncertainty"]
    errs = []
    for r in _single_rows(hw).itertuples():
        tokens = int(r.note.split("-token prompt")[0].split()[-1])
        sim = transfer_ms(one_transfer_world(hw, model, tokens))
        errs.append((sim - r.ms) / r.ms)
    errs = np.abs(errs)
    assert len(errs) == 9
    assert errs.mean() <= u, (errs, u)
    assert errs.max() <= 2 * u, (errs, u)


def test_fitted_many_chunk_transfer_comes_back_through_the_world():
    """DeepSeek-V3 10K prompt at page 64 from one DP-attention rank (its own NIC) under load:
    157 pages x 61 layers = 9,577 work requests, 60 ms measured (SGLang PR #7236). The
    per-chunk cost was fitted on this row jointly with the 1P1D rows, so the world with P's pool
    churned to single-page runs returns it within the stated uncertainty."""
    group = {"nodes": 2, "dp": 16, "ep": 16, "enable_dp_attention": True}
    d = one_transfer_world("h800", "deepseek-v3", 10000, page=64, group=group)
    u = load_hardware_ref("h800").calibration["mooncake"]["rel_uncertainty"]
    sim = transfer_ms(d, churn_prefill_pool=True)
    assert abs(sim - 60.0) / 60.0 <= u, sim
    # the same transfer from a fresh pool is one run per layer: bandwidth-bound, ~2x faster
    fresh = transfer_ms(one_transfer_world("h800", "deepseek-v3", 10000, page=64, group=group))
    assert fresh < 0.7 * sim, (fresh, sim)
