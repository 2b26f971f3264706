"""Hypothesis strategies: random small scenarios that reach every path of the world —
drops, retraction, DP attention with EP on a MoE model, two-batch overlap, P2P NCCL modes with
tiny receive buffers, prefix caching with offload tiers (local and a shared remote pool),
closed loops and a simulated-time horizon."""
from __future__ import annotations

import copy

import numpy as np
from hypothesis import strategies as st

from builders import scenario_dict


def _dense(draw, kind: str) -> dict:
    d = scenario_dict(kind, seed=draw(st.integers(0, 10_000)))
    page = draw(st.sampled_from([1, 16, 64]))
    chunk = draw(st.sampled_from([256, 1024, 8192, -1]))
    for groups in d["cluster"].values():
        for g in groups:
            g["count"] = draw(st.integers(1, 2))
            g["engine"].update(page_size=page, chunked_prefill_size=chunk,
                               max_running_requests=draw(st.sampled_from([None, 4, 64])),
                               # a tiny pool forces pre-allocation waits, retractions and drops
                               max_total_tokens=draw(st.sampled_from([None, 3000, 6000, 20000])),
                               min_kv_reserve_tokens=1024,
                               enable_mixed_chunk=draw(st.booleans()))
    if kind == "disagg":
        mode = draw(st.sampled_from(["mooncake", "get", "put", "put_async"]))
        if mode != "mooncake":
            d["transfer"] = {"backend": "nccl", "mode": mode,
                             "kv_buffer_fraction": draw(st.sampled_from([0.0, 0.0005, 0.002])),
                             "host_pool_gib": draw(st.sampled_from([0.0, 0.1, 32.0]))}
    return d


def _moe(draw) -> dict:
    """Qwen3-235B on H100 nodes: DP attention + EP, DeepEP modes, two-batch overlap."""
    def group():
        dp = draw(st.sampled_from([1, 8]))
        return {"count": 1, "nodes": 1, "dp": dp, "ep": 8, "enable_dp_attention": dp > 1,
                "engine": {"page_size": 64, "chunked_prefill_size": draw(st.sampled_from([2048, 16384])),
                           "enable_two_batch_overlap": draw(st.booleans()),
                           "deepep_mode": draw(st.sampled_from(["auto", "normal", "low_latency"])),
                           "max_running_requests": draw(st.sampled_from([None, 16]))}}
    kind = draw(st.sampled_from(["disagg", "colocated"]))
    cluster = ({"prefill": [group()], "decode": [group()]} if kind == "disagg" else {"colocated": [group()]})
    d = scenario_dict(kind, seed=draw(st.integers(0, 10_000)))
    d.update(model="qwen3-235b-a22b", cluster=cluster)
    return d


@st.composite
def scenarios(draw, allow_moe: bool = True):
    kind = draw(st.sampled_from(["disagg", "colocated", "moe"] if allow_moe else ["disagg", "colocated"]))
    d = _moe(draw) if kind == "moe" else _dense(draw, kind)
    d["router"] = {"policy": draw(st.sampled_from(["round_robin", "random", "least_loaded", "cache_aware"]))}
    d["workload"].update(num_requests=draw(st.integers(1, 60)), rate=draw(st.sampled_from([None, 2.0, 50.0])),
                         output={"dist": "uniform", "min": 1, "max": draw(st.sampled_from([1, 50, 400]))},
                         input={"dist": "uniform", "min": 1, "max": draw(st.sampled_from([64, 3000, 8000]))},
                         max_concurrency=draw(st.sampled_from([None, 3])))
    if draw(st.booleans()):  # shared prompt prefixes (hash ids), optionally offloaded
        d["workload"].update(prefix_groups=draw(st.integers(1, 4)), shared_prefix_tokens=draw(st.sampled_from([512, 2048])))
        if draw(st.booleans()):
            dev = draw(st.sampled_from(["host-dram-pcie5", "local-nvme-gen4", "remote-nvmeof-400g"]))
            d["kv_offload"] = {"tiers": [{"device": dev, "capacity_gib": draw(st.sampled_from([0.05, 1.0]))}],
                               "load_policy": draw(st.sampled_from(["cheaper", "load", "recompute"])),
                               "write_through": draw(st.booleans()),
                               "eviction": draw(st.sampled_from(["lru", "fifo"]))}
    if draw(st.integers(0, 5)) == 0:
        d["duration_limit_s"] = draw(st.sampled_from([0.5, 3.0, 30.0]))
    if draw(st.integers(0, 3)) == 0:  # failures: instances killed mid-run, some come back
        names = _names(d)
        events = []
        for _ in range(draw(st.integers(1, 3))):
            kind = draw(st.sampled_from(["gpu", "gpu", "nic", "node"]))
            ev = {"at_s": draw(st.sampled_from([0.0, 0.05, 0.5, 2.0])), "kill": kind,
                  "recover_after_s": draw(st.sampled_from([None, 0.0, 1.0, 5.0]))}
            if kind == "node":
                ev["node"] = draw(st.integers(0, 1))
            else:
                ev["instance"] = draw(st.sampled_from(names))
            events.append(ev)
        d["faults"] = {"events": events,
                       "detection": {"heartbeat_s": draw(st.sampled_from([0.1, 1.0])), "misses": 2},
                       "retry": {"policy": draw(st.sampled_from(["restart", "drop"])),
                                 "max_retries": draw(st.integers(0, 2))},
                       "restart": {"process_s": 0.5, "weight_load_gbps": 100.0, "comm_init_s": 0.1,
                                   "graph_capture_s": 0.5},
                       "request_timeout_s": draw(st.sampled_from([None, 5.0, 60.0]))}
    return d


def _names(d: dict) -> list[str]:
    import pdsim.specs.scenario as S
    from pdsim.specs._convert import build

    return [n for *_x, n in build(S.ClusterSpec, S.normalize_cluster({"cluster": d["cluster"]})["cluster"])
            .instance_names()]


def timestamps_in_order(df) -> list[str]:
    """Names of life-cycle steps that happen before their predecessor, in finished requests."""
    order = ["arrival_s", "routed_s", "prefill_start_s", "prefill_end_s", "transfer_start_s", "transfer_end_s",
             "first_token_s", "finish_s"]
    fin = df[df["finished"]]
    bad = []
    for a, b in zip(order, order[1:]):
        x, y = fin[a].to_numpy(), fin[b].to_numpy()
        ok = np.isnan(x) | np.isnan(y) | (y >= x - 1e-12)
        if not ok.all():
            bad.append(f"{b} < {a}")
    return bad


def copy_dict(d: dict) -> dict:
    return copy.deepcopy(d)
