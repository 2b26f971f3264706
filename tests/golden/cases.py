"""Golden cases: every bundled scenario plus small scenarios that reach the world's rarer paths
(drops, DP attention, P2P NCCL modes, retraction, offload tiers, closed loop).

Their per-request tables (same seed) are frozen under ``tests/golden/data``; a change to the
world or the prices that moves any of them must be explained and the files re-frozen with
``python -m tests.golden.freeze`` (see tests/golden/README.md).
"""
from __future__ import annotations

import copy
from pathlib import Path

import pdsim
from pdsim.specs.catalog import scenario_keys

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"


def _small(kind: str = "disagg", **over) -> dict:
    eng = {"chunked_prefill_size": 2048, "page_size": 16}
    if kind == "colocated":
        cluster = {"colocated": [{"count": 1, "gpus": 1, "engine": dict(eng)}]}
    else:
        cluster = {"prefill": [{"count": 1, "gpus": 1, "engine": dict(eng)}],
                   "decode": [{"count": 1, "gpus": 1, "engine": dict(eng)}]}
    d = {"name": f"golden-{kind}", "hardware": "h100", "model": "llama-3.1-8b", "cluster": cluster,
         "workload": {"kind": "synthetic", "num_requests": 200, "rate": 20.0,
                      "input": {"dist": "uniform", "min": 64, "max": 4096},
                      "output": {"dist": "uniform", "min": 1, "max": 256}},
         "slo": {"ttft_ms": 2000, "tpot_ms": 50}, "seed": 3}
    d.update(over)
    return d


def _dicts() -> dict[str, dict]:
    cases = {}
    # KV pool small enough to retract and recompute, with drops of prompts that never fit
    d = _small("colocated")
    d["cluster"]["colocated"][0]["engine"].update(max_total_tokens=6000, min_kv_reserve_tokens=1024)
    d["workload"]["input"] = {"dist": "uniform", "min": 64, "max": 8000}
    cases["small-colocated-retract"] = d
    for mode in ("get", "put", "put_async"):
        d = _small("disagg", transfer={"backend": "nccl", "mode": mode, "kv_buffer_fraction": 0.01,
                                       "host_pool_gib": 0.5})
        cases[f"small-nccl-{mode}"] = d
    d = _small("disagg", router={"policy": "least_loaded"})
    d["cluster"]["prefill"][0]["count"] = 2
    d["cluster"]["decode"][0]["engine"]["max_running_requests"] = 16
    cases["small-mooncake-2p1d"] = d
    # DP attention + EP on a MoE model (Qwen3-235B on one H100 node for prefill and decode)
    moe = {"count": 1, "nodes": 1, "dp": 8, "ep": 8, "enable_dp_attention": True,
           "engine": {"chunked_prefill_size": 8192, "page_size": 64, "enable_two_batch_overlap": True}}
    d = {"name": "golden-moe-dp", "hardware": "h100", "model": "qwen3-235b-a22b",
         "cluster": {"prefill": [copy.deepcopy(moe)], "decode": [copy.deepcopy(moe)]},
         "workload": {"kind": "synthetic", "num_requests": 300, "rate": 10.0,
                      "input": {"dist": "lognormal", "mean": 2000, "std": 1500, "min": 16, "max": 16000},
                      "output": {"dist": "lognormal", "mean": 200, "std": 150, "min": 2, "max": 1000}},
         "slo": {"ttft_ms": 2000, "tpot_ms": 50}, "seed": 5}
    d["cluster"]["decode"][0]["engine"]["deepep_mode"] = "low_latency"
    cases["small-moe-dp-tbo"] = d
    d = _small("colocated")
    d["workload"] = {"kind": "synthetic", "num_requests": 150, "rate": 1000.0, "max_concurrency": 8,
                     "input": {"dist": "uniform", "min": 100, "max": 2000},
                     "output": {"dist": "uniform", "min": 10, "max": 200}}
    cases["small-closed-loop"] = d
    return cases


def case_names() -> list[str]:
    return sorted(scenario_keys()) + sorted(_dicts())


def load_case(name: str):
    dicts = _dicts()
    if name in dicts:
        return pdsim.resolve_scenario(dicts[name], f"<golden {name}>", REPO / "workloads" / "scenarios")
    return pdsim.load_scenario(name)


def request_table(name: str):
    """The per-request table of a case, as ``pdsim.simulate(...).requests``."""
    return pdsim.simulate(load_case(name)).requests


def golden_path(name: str) -> Path:
    return DATA / f"{name}.csv.gz"
