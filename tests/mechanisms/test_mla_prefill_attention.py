"""MLA prefill attention as SGLang runs it: FA3 MHA on the non-absorbed heads, with a cost per
query row beyond the causal pairs (costs/compute.py ``prefill_attention_s``, calibrate
fit_compute.fit_mha_prefill).

Sources: SGLang (deepseek_v2.py, ``AttnForwardMethod.MHA`` / ``MHA_CHUNKED_KV`` on the fa3
backend, SGLang's default on Hopper: docs/backend/attention_backend.md "FlashAttention 3
(Default for Hopper Machines, e.g., H100, H200, H20)") runs DeepSeek prefill without a cached
prefix as MHA, q/k head dim 192, v 128, one K/V head per query head; FA3's own MHA rows
(calibration/data/attention.csv, AIConfigurator 0.12.0's SGLang 0.5.14 context-attention table
on H100, kv_heads = heads) show its fraction of peak growing with the prompt (25% at 1K causal,
58% at 16K): a per-query-tile cost (diagonal tile, Q load, O store, pipeline fill) that one
efficiency cannot carry.
"""
from __future__ import annotations

import numpy as np

from pdsim.calibrate import data
from pdsim.calibrate.fit_compute import _fit_prefill, fit_mha_prefill
from pdsim.costs.compute import gqa_pair_flops, prefill_attention_s
from pdsim.specs.catalog import hardware_keys, load_hardware_ref

from ._deepseek import H100

HWS = {k: load_hardware_ref(k) for k in hardware_keys()}


def _mha_rows(hw: str = "h100"):
    a = data.load("attention")
    return a[(a["hardware"] == hw) & (a["heads"] == a["kv_heads"])]


def test_fa3_mha_efficiency_grows_with_the_prompt_and_the_row_term_explains_it():
    rows = _mha_rows()
    with_rows = fit_mha_prefill(rows, HWS)
    without = _fit_prefill(rows, HWS, lambda r: gqa_pair_flops(r["heads"].to_numpy(float), r["head_dim"].to_numpy(float)),
                           "attention", ["heads", "context"], row_term=False)
    assert with_rows["heldout_mape"] < 0.08 < 0.15 < without["heldout_mape"]
    assert 300 < with_rows["row_pairs"] < 1500  # key columns per query row: a few 128-wide tiles
    # the phenomenon in the data: 128-head MHA-shaped rows, fraction of peak at 1K vs 16K causal
    peak = H100.gpu.peak_flops("bf16")
    big = rows[rows["heads"] >= 32]

    def frac(n):
        r = big[big["context"] == n]
        pairs = r["batch"] * r["new_tokens"] * r["new_tokens"] / 2.0
        return float(np.mean(pairs * gqa_pair_flops(r["heads"], r["head_dim"]) / (r["us"] * 1e-6) / peak))
    assert frac(1024) < 0.3 and frac(16384) > 0.55
    # and the fitted form reproduces the rise: 1K runs at under half the 16K fraction
    e = with_rows["eff"]
    f = [n * n / 2 / (n * n / 2 + n * with_rows["row_pairs"]) * e for n in (1024, 16384)]
    assert f[0] < 0.5 * f[1] + 0.05 and abs(f[1] - frac(16384)) < 0.08


def test_the_calibrated_mla_prefill_uses_the_mha_fit():
    p = H100.calibration["mla_prefill"]
    assert p.get("row_pairs", 0) > 0 and "kv_heads = heads" in str(p.get("data"))
    # one 4096-token prompt, 128 heads of 192/128: the row term adds ~n_rows x row_pairs pairs
    pf = 2.0 * 128 * (192 + 128)
    t = prefill_attention_s(4096 * 4096 / 2, pf, H100.gpu.peak_flops("bf16"), p["eff"], 0.0, 4096, p["row_pairs"])
    t0 = prefill_attention_s(4096 * 4096 / 2, pf, H100.gpu.peak_flops("bf16"), p["eff"], 0.0)
    assert 1.2 < t / t0 < 1.5

