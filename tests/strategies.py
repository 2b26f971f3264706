"""Hypothesis strategies: random small scenarios that reach every path of the world —
drops, retraction, DP attention with EP on a MoE model, two-batch overlap, P2P NCCL modes with
tiny receive buffers, prefix caching with offload tiers (local and a shared remote pool),
closed loops and a simulated-time horizon; and the control blocks: every batch scheduler and
KV transport, priority classes, P/D overheads, faults (timeline events, random MTBF down to the
documented 3.6 s bound, the ``kill_every`` plug-in), autoscalers (schedule, queue, SLO), an
expert service whose servers fail, and replicas."""
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
        mode = draw(st.sampled_from(["mooncake", "get", "put", "put_async", "shared_storage"]))
        if mode == "shared_storage":
            d["transfer"] = {"backend": "shared_storage"}
        elif mode != "mooncake":
            d["transfer"] = {"backend": "nccl", "mode": mode,
                             "kv_buffer_fraction": draw(st.sampled_from([0.0, 0.0005, 0.002])),
                             "host_pool_gib": draw(st.sampled_from([0.0, 0.1, 32.0]))}
    return d


SCHEDULERS = ["fcfs", "lpm", "lof", "spf", "dfs-weight", "priority", "priority-low-first"]


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
    if draw(st.integers(0, 2)) == 0:  # expert-as-a-service: the decode (or colocated) side's MoE layers
        side = cluster["decode" if kind == "disagg" else "colocated"][0]
        side.update(dp=1, enable_dp_attention=False, expert_service=True)
        side.pop("ep")
        d["experts"] = {"servers": 16, "replicas": draw(st.sampled_from([1, 2]))}
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
    for groups in d["cluster"].values():  # every batch scheduler
        for g in groups:
            g.setdefault("engine", {})["schedule_policy"] = draw(st.sampled_from(SCHEDULERS))
    if draw(st.integers(0, 2)) == 0:
        d["workload"]["priority_classes"] = [{"priority": 0, "share": 0.5}, {"priority": 2, "share": 0.5}]
    if draw(st.integers(0, 2)) == 0:  # the request path and P/D handshakes
        d["overheads"] = {"router_ms": draw(st.sampled_from([0.0, 5.0, 50.0])),
                          "bootstrap_ms": draw(st.sampled_from([None, 2.0])),
                          "connect_ms": draw(st.sampled_from([None, 20.0]))}
    if draw(st.integers(0, 2)) == 0:  # failures: timeline, random, plug-in; some come back
        d["faults"] = _faults(draw, d)
    if draw(st.integers(0, 3)) == 0:
        d["autoscaler"] = _autoscaler(draw, d)
    if draw(st.integers(0, 6)) == 0 and not (d.get("faults") or {}).get("events") \
            and d["workload"].get("max_concurrency") is None:  # replicas need open-loop arrivals
        d["replicas"] = {"count": 2, "split": draw(st.sampled_from(["round_robin", "prefix", "random"]))}
    return d


def _faults(draw, d: dict) -> dict:
    names = _names(d)
    f = {"detection": {"heartbeat_s": draw(st.sampled_from([0.1, 1.0])), "misses": 2},
         "retry": {"policy": draw(st.sampled_from(["restart", "drop"])), "max_retries": draw(st.integers(0, 2))},
         "restart": {"process_s": 0.5, "weight_load_gbps": 100.0, "comm_init_s": 0.1, "graph_capture_s": 0.5},
         "request_timeout_s": draw(st.sampled_from([None, 5.0, 60.0]))}
    kinds = ["gpu", "gpu", "nic", "node"] + (["expert_server"] if "experts" in d else [])
    if draw(st.booleans()):
        events = []
        for _ in range(draw(st.integers(1, 3))):
            kind = draw(st.sampled_from(kinds))
            ev = {"at_s": draw(st.sampled_from([0.0, 0.05, 0.5, 2.0])), "kill": kind,
                  "recover_after_s": draw(st.sampled_from([None, 0.0, 1.0, 5.0]))}
            if kind == "node":
                ev["node"] = 0  # every strategy cluster has node 0 (the first instance's)
            elif kind == "expert_server":
                ev["server"] = draw(st.integers(0, d["experts"]["servers"] - 1))
            else:
                ev["instance"] = draw(st.sampled_from(names))
            events.append(ev)
        f["events"] = events
    if draw(st.booleans()):  # random failures, down to the documented MTBF bound (3.6 s per component)
        f["random"] = [{"component": draw(st.sampled_from(kinds)), "mtbf_h": draw(st.sampled_from([0.001, 0.01, 1.0])),
                        "mttr_s": draw(st.sampled_from([0.0, 1.0, 30.0]))}]
    if draw(st.integers(0, 2)) == 0:
        f["plugins"] = [{"policy": "kill_every",
                         "params": {"interval_s": draw(st.sampled_from([0.5, 2.0])), "count": draw(st.integers(1, 3)),
                                    "recover_after_s": draw(st.sampled_from([None, 1.0]))}}]
    return f


def _autoscaler(draw, d: dict) -> dict:
    groups = [(role, i) for role, gs in d["cluster"].items() for i in range(len(gs))]
    role, index = draw(st.sampled_from(groups))
    policy = draw(st.sampled_from(["schedule", "queue", "slo"]))
    if policy == "schedule":
        params = {"steps": [{"at_s": draw(st.sampled_from([0.0, 1.0, 5.0])), "count": draw(st.integers(1, 3)),
                             "role": role, "index": index} for _ in range(draw(st.integers(1, 2)))]}
    elif policy == "queue":
        params = {"role": role, "index": index, "target_waiting": draw(st.sampled_from([0.5, 4.0])), "max_count": 3}
    else:
        params = {"role": role, "index": index, "max_count": 3}
    return {"policy": policy, "interval_s": draw(st.sampled_from([0.5, 2.0])), "params": params}


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
