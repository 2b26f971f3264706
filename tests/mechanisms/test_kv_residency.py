"""The decode attention's KV read rate by the step's working set (calibration.kv_residency).

The phenomenon, measured on the emr3 host (Intel Xeon, 2 vCPUs, lscpu L3 260 MiB shared with the
VM's neighbours; validation/cpu-vllm-calibration/emr3/profile5/kv_residency.csv, 2026-11-29): vLLM's
CPU decode attention kernel, run over the tiny Llama's 4 layers' KV caches in turn as the engine runs
them, reads ~30 ns per context token per layer while the 4 caches fit the last-level cache and ~69 ns
once they do not (8 MiB to 1 GiB of KV; the cliff lay between 136 and 184 MiB that hour, between 96
and 112 MiB an hour before). A decode step sweeps every layer's KV once and the next step sweeps it
again: under an LRU-like cache such a cyclic sweep is all hits below the capacity and nearly all
misses above it. Served, the engine's other processes share the cache: the served runs of a re-measurement
(overhead.json, up to 32 x 2,120 tokens) put the cliff lower and spread it, at 26-34 MiB at
01:00-02:15 and 74-126 MiB at 03:20-04:15 the same night (docs/mechanisms/kv-residency.md).

The price: a share Phi(ln(W / cache_bytes) / cache_log_width) of the decode KV bytes at ``dram_gbps``,
the rest at ``cache_gbps``, W the step's KV plus the weights it streams (costs/compute.py
dram_share, costs/roofline.py); such a step is priced at its own context (not linear in decode_ctx).
"""
from __future__ import annotations

import csv
import math
import re
import shutil

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

import pdsim
from pdsim.calibrate.kv_residency import MIN_STEP, fit_kv_residency
from pdsim.costs.compute import dram_share
from pdsim.sim.build import step_cost

from builders import REPO, fit_cpu_profile

EMR3 = REPO / "validation" / "cpu-vllm-calibration" / "emr3"
PROFILE5 = EMR3 / "profile5" / "cpu-epyc-2c.yaml"


def _rows(levels: list[tuple[float, float]]) -> list[dict]:
    return [{"working_set_bytes": w, "ns_per_token": t, "kv_bytes_per_token": 512} for w, t in levels]


def test_the_fit_puts_the_cache_between_the_last_fast_and_the_first_slow_working_set():
    rows = _rows([(8e6, 30.0), (16e6, 29.0), (32e6, 31.0), (64e6, 30.5), (128e6, 70.0), (256e6, 68.0),
                  (512e6, 69.0)])
    r = fit_kv_residency(rows)
    assert 64e6 < r["cache_bytes"] < 128e6
    assert (r["cache_bytes_lo"], r["cache_bytes_hi"]) == (64e6, 128e6)
    assert r["cache_gbps"] == pytest.approx(512 / 30.25, rel=1e-3)  # bytes / ns = GB/s
    assert r["dram_gbps"] == pytest.approx(512 / 69.0, rel=1e-3)


def test_a_sweep_without_a_cliff_gives_one_rate_and_no_cache():
    r = fit_kv_residency(_rows([(8e6, 30.0), (64e6, 31.0), (512e6, 32.0)]))
    assert r["cache_bytes"] == 0.0 and r["cache_gbps"] == r["dram_gbps"]
    assert fit_kv_residency(_rows([(8e6, 30.0), (64e6, 31.0)])) is None  # too few rows to say


def test_the_measured_sweep_shows_the_cliff():
    rows = list(csv.DictReader(open(EMR3 / "profile5" / "kv_residency.csv")))
    ns = {float(r["working_set_bytes"]): float(r["ns_per_token"]) for r in rows}
    small = [t for w, t in ns.items() if w <= 64 * 2**20]
    big = [t for w, t in ns.items() if w >= 512 * 2**20]
    assert small and big and min(big) > 2.0 * max(small) > MIN_STEP * max(small)
    r = fit_kv_residency(rows)
    assert 64 * 2**20 < r["cache_bytes"] < 512 * 2**20
    assert r["dram_gbps"] < 0.5 * r["cache_gbps"]


@pytest.fixture(scope="module")
def cpu_cost():
    sc = pdsim.load_scenario("cpu-vllm-tiny-llama", [f"hardware={PROFILE5}"])
    g = next(g for _r, _i, g in sc.scenario.cluster.groups())
    return step_cost(sc, sc.hardware, g, "colocated")


def test_a_step_reads_its_kv_from_the_cache_below_the_size_and_from_dram_past_it(cpu_cost):
    c = cpu_cost
    assert not c.linear and c.kv_residency is not None
    res = c.hw.calibration["kv_residency"]
    model = c.model
    w0, per_ctx, cache, width = c.kv_residency
    assert (w0, cache, width) == (model.weight_bytes, res["cache_bytes"], res["cache_log_width"])
    assert per_ctx == model.kv_bytes_per_token(model.kv_dtype)
    spread = math.exp(5 * max(width, 0.05))  # five widths either side: the share is 0 or 1 to 3e-7
    lo, hi = (cache / spread - w0) / per_ctx, (cache * spread - w0) / per_ctx
    assert lo > 0
    b = 16

    def attn(ctx):
        return c.breakdown(0, 0.0, 0, b, ctx)["attn_core"]
    per_tok_hot = (attn(lo) - attn(0.9 * lo)) / (0.1 * lo)
    per_tok_cold = (attn(1.1 * hi) - attn(hi)) / (0.1 * hi)
    assert per_tok_hot == pytest.approx(per_ctx / (res["cache_gbps"] * 1e9), rel=1e-4)
    assert per_tok_cold == pytest.approx(per_ctx / (res["dram_gbps"] * 1e9), rel=1e-4)


def test_the_dram_share_is_a_cliff_spread_in_log_size():
    assert dram_share(0.99e8, 1e8, 0.0) == 0.0 and dram_share(1.01e8, 1e8, 0.0) == 1.0
    assert dram_share(1e8, 1e8, 0.25) == pytest.approx(0.5)
    assert dram_share(1e8 * math.exp(0.25), 1e8, 0.25) == pytest.approx(0.8413, abs=1e-4)  # one width: Phi(1)
    shares = [dram_share(w, 1e8, 0.5) for w in (1e7, 5e7, 1e8, 2e8, 1e9)]
    assert shares == sorted(shares) and shares[0] < 1e-5 and shares[-1] > 1 - 1e-5


@settings(max_examples=60, deadline=None)
@given(b=st.integers(1, 64), ctx=st.floats(0, 3e5), more=st.floats(0, 1e5))
def test_more_context_never_makes_a_decode_step_faster(cpu_cost, b, ctx, more):
    t = cpu_cost.step_time
    assert t(0, 0.0, 0, b, ctx + more) >= t(0, 0.0, 0, b, ctx)


def test_without_the_block_the_price_is_the_linear_one_as_before():
    sc = pdsim.load_scenario("cpu-vllm-tiny-llama", [])
    g = next(g for _r, _i, g in sc.scenario.cluster.groups())
    c = step_cost(sc, sc.hardware, g, "colocated")
    assert "kv_residency" not in c.hw.calibration and c.kv_residency is None and c.linear


def test_the_served_runs_place_the_cache_and_the_cliff_explains_them_better_than_a_linear_term(tmp_path):
    """profile4's served runs (12 shapes, 2026-11-29 02:14 UTC) with the kernel sweep: the host fit
    ITL - priced compute = a + b B + c B context leaves every row within 6% with the cliff priced,
    against -10% to +21% with one rate per context token (the profile as committed)."""
    shutil.copy(EMR3 / "profile5" / "kv_residency.csv", tmp_path / "kv_residency.csv")
    prof = yaml.safe_load(fit_cpu_profile(tmp_path, EMR3 / "profile4").read_text())
    res = prof["calibration"]["kv_residency"]
    assert res["cache_bytes_lo"] < res["cache_bytes"] < res["cache_bytes_hi"] < res["cache_bytes_kernel"]
    cliff = _fit_errors(prof["sources"]["efficiency.step_overhead_us"])
    linear = _fit_errors(yaml.safe_load((EMR3 / "profile4" / "cpu-epyc-2c.yaml").read_text())["sources"]
                         ["efficiency.step_overhead_us"])
    assert len(cliff) == len(linear) == 12
    assert max(map(abs, cliff)) <= 6 < 15 <= max(map(abs, linear))


def _fit_errors(text: str) -> list[float]:
    """The rows' fit errors (%) a profile's step_overhead_us source lists."""
    return [float(x) for x in re.findall(r"fit ([-+]\d+)%", " ".join(text.split()))]


@pytest.mark.parametrize("key, value, words", [
    ("cache_bytes", -1, ">= 0"),
    ("cache_gbps", 0, "> 0"),
    ("dram_gbps", "fast", "a number"),
    ("dram_gbps", 20.0, "must not exceed the cache's"),  # DRAM faster: more context would speed a step up
])
def test_bad_kv_residency_constants_are_refused_naming_the_field(tmp_path, key, value, words):
    good = {"cache_bytes": 1.1e8, "cache_gbps": 17.0, "dram_gbps": 7.5}
    lines = ["base: cpu-epyc-2c", "calibration:", "  kv_residency:"] + [
        f"    {k}: {v}" for k, v in {**good, key: value}.items()]
    path = tmp_path / "bad.yaml"
    path.write_text("\n".join(lines) + "\n")
    from pdsim.specs.catalog import load_hardware_ref
    from pdsim.specs.errors import SpecError

    with pytest.raises(SpecError) as err:
        load_hardware_ref(str(path))
    msg = str(err.value)
    assert f"calibration.kv_residency.{key}" in msg and words in msg and "bad.yaml" in msg
