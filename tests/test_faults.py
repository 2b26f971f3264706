"""Failure semantics (issue 14): what goes down with a GPU, node or NIC, detection by heartbeat,
retries, restarts, cancelled transfers, expert-service replicas, autoscaling. The world checks
its conservation laws at the end of every run (tests/conftest.py): every request finished or
dropped with a reason, every page, queue, batch, buffer, flow and held request given back."""
from __future__ import annotations

import copy

import pdsim

from builders import resolve, scenario_dict

FAST_RESTART = {"process_s": 1.0, "weight_load_gbps": 100.0, "comm_init_s": 0.5, "graph_capture_s": 1.0}


def disagg(p=1, d=2, **over) -> dict:
    dd = scenario_dict("disagg", **over)
    dd["cluster"]["prefill"][0]["count"] = p
    dd["cluster"]["decode"][0]["count"] = d
    dd["workload"].update(num_requests=300, rate=20.0)
    return dd


def faults(*events, **kw) -> dict:
    return {"events": list(events), "restart": FAST_RESTART, **kw}


def run(d):
    return pdsim.simulate(resolve(d))


def events(res, kind=None):
    return [e for e in res.record.stats["events"] if kind is None or e["kind"] == kind]


def test_a_gpu_takes_its_whole_instance_down_and_it_restarts():
    d = disagg(d=1)
    d["faults"] = faults({"at_s": 3.0, "kill": "gpu", "instance": "D0", "gpu": 0, "recover_after_s": 2.0})
    res = run(d)
    df = res.requests
    assert df["finished"].all()
    assert df["retries"].sum() > 0  # what D held was lost and sent again
    kinds = [e["kind"] for e in events(res)]
    assert kinds[:2] == ["failed", "detected"] and "up" in kinds
    # detection at the 3rd missed 1-s heartbeat after t=3
    assert events(res, "detected")[0]["time_s"] == 6.0
    # no token of a retried request is older than its retry: the first token comes after the restart
    up = events(res, "up")[0]["time_s"]
    retried = df[df["retries"] > 0]
    assert (retried["first_token_s"] >= events(res, "failed")[0]["time_s"]).all()
    assert res.record.stats["capacity_gpus"][1][1] == res.gpus - 1 and up > 6.0


def test_tp_units_fail_alone_and_the_others_keep_serving():
    d = disagg(d=2)
    d["faults"] = faults({"at_s": 2.0, "kill": "gpu", "instance": "D0.1"})  # never comes back
    res = run(d)
    df = res.requests
    assert df["finished"].all()
    late = df[df["arrival_s"] > 8.0]  # after detection every request goes to the unit left
    assert set(late["decode_instance"]) == {"D0.0"}
    assert len(events(res, "up")) == 0


def test_a_dead_prefill_loses_its_queue_to_retries_or_drops():
    for policy, expect_drops in (("restart", False), ("drop", True)):
        d = disagg(p=2, d=1)
        d["faults"] = faults({"at_s": 2.0, "kill": "gpu", "instance": "P0.0"}, retry={"policy": policy})
        df = run(d).requests
        reasons = set(df["drop_reason"].dropna())
        if expect_drops:
            assert reasons == {"prefill_gpu_failed"}
            assert df["retries"].sum() == 0
        else:
            assert df["finished"].all() and df["retries"].sum() > 0


def test_retries_are_bounded():
    d = disagg(p=1, d=1)
    # P dies and never comes back: every retry is lost again, then the request fails for good
    d["faults"] = faults({"at_s": 1.0, "kill": "gpu", "instance": "P0"}, retry={"policy": "restart", "max_retries": 1})
    df = run(d).requests
    assert (df.loc[df["drop_reason"].notna(), "drop_reason"].isin(
        {"prefill_gpu_failed_after_retries", "no_instance_available"})).all()
    assert df["drop_reason"].notna().sum() > 0 and df["retries"].max() <= 1


def test_transfers_to_a_dead_decode_are_cancelled_and_put_does_not_hang():
    for mode in ("put", "put_async", "get"):
        d = disagg(p=1, d=2)
        d["transfer"] = {"backend": "nccl", "mode": mode, "kv_buffer_fraction": 0.002, "host_pool_gib": 1.0}
        d["workload"]["input"] = {"dist": "uniform", "min": 2000, "max": 4000}
        d["faults"] = faults({"at_s": 1.0, "kill": "gpu", "instance": "D0.1", "recover_after_s": 1.0})
        res = run(d)
        assert res.requests["finished"].all(), mode


def test_a_node_takes_every_instance_on_it():
    d = disagg(p=1, d=2)  # 3 one-GPU instances packed on node 0 of h100
    d["faults"] = faults({"at_s": 2.0, "kill": "node", "node": 0, "recover_after_s": 3.0})
    res = run(d)
    assert {e["what"] for e in events(res, "failed")} == {"P0", "D0.0", "D0.1"}
    assert res.requests["finished"].all()


def test_a_nic_slows_transfers_then_takes_the_instance_with_the_last_one():
    d = disagg(p=1, d=1)
    d["hardware"] = "h800"  # 8 NICs per node: a 1-GPU instance has one
    d["faults"] = faults({"at_s": 2.0, "kill": "nic", "instance": "D0", "recover_after_s": 2.0})
    res = run(d)
    assert [e["kind"] for e in events(res)][:2] == ["nic_failed", "failed"]
    assert res.requests["finished"].all()


def test_random_failures_are_seeded():
    d = disagg(p=2, d=2)
    d["workload"].update(num_requests=400, rate=10.0)
    d["faults"] = {"random": [{"component": "gpu", "mtbf_h": 0.005, "mttr_s": 3.0}], "restart": FAST_RESTART}
    a, b = run(copy.deepcopy(d)), run(copy.deepcopy(d))
    assert events(a) == events(b) and len(events(a, "failed")) > 0
    assert a.requests.equals(b.requests)
    assert "stuck" not in set(a.requests["drop_reason"].dropna())


def test_fault_plugin_kills_on_schedule():
    d = disagg(p=1, d=2)
    d["faults"] = {"plugins": [{"policy": "kill_every", "params": {"start_s": 1.0, "interval_s": 2.0, "count": 2,
                                                                    "recover_after_s": 1.0, "role": "decode"}}],
                   "restart": FAST_RESTART}
    res = run(d)
    assert [e["time_s"] for e in events(res, "failed")] == [1.0, 3.0]


def test_request_timeout_retries_requests_stuck_behind_an_undetected_failure():
    # the monitor is slow (300 s): requests the router keeps sending to the dead D0.0 time out and
    # are sent again; round robin puts the retry on the live D0.1
    d = disagg(p=1, d=2)
    d["faults"] = faults({"at_s": 1.0, "kill": "gpu", "instance": "D0.0", "recover_after_s": 0.0},
                         detection={"heartbeat_s": 100.0, "misses": 3}, request_timeout_s=5.0,
                         retry={"max_retries": 3})
    res = run(d)
    df = res.requests
    assert df["finished"].mean() > 0.9
    assert set(df["drop_reason"].dropna()) <= {"timeout_after_retries"}
    assert res.record.stats["retries_by_cause"].get("timeout", 0) > 0


def _eaas(servers=16, replicas=2) -> dict:
    g = {"count": 1, "nodes": 1, "dp": 8, "enable_dp_attention": True,
         "engine": {"page_size": 64, "chunked_prefill_size": 8192}}
    d = scenario_dict("disagg")
    d.update(model="qwen3-235b-a22b",
             cluster={"prefill": [dict(copy.deepcopy(g), ep=8)], "decode": [dict(copy.deepcopy(g), expert_service=True)]},
             experts={"servers": servers, "replicas": replicas, "poll_timeout_s": 0.05})
    d["workload"].update(num_requests=150, rate=5.0, input={"dist": "uniform", "min": 200, "max": 2000},
                         output={"dist": "uniform", "min": 50, "max": 300})
    return d


def test_expert_servers_fail_over_to_replicas():
    d = _eaas()
    d["faults"] = faults({"at_s": 2.0, "kill": "expert_server", "server": 1})
    res = run(d)
    assert res.requests["finished"].all()
    assert not events(res, "stalled")  # its experts have replicas on other servers


def test_losing_every_replica_stalls_clients_until_one_is_back():
    d = _eaas(servers=16, replicas=2)  # expert e on servers e % 16 and (e + 8) % 16
    d["faults"] = faults({"at_s": 2.0, "kill": "expert_server", "server": 1, "recover_after_s": 3.0},
                         {"at_s": 2.5, "kill": "expert_server", "server": 9})
    res = run(d)
    assert events(res, "stalled") and res.requests["finished"].all()
    up = events(res, "up")[0]["time_s"]
    df = res.requests
    # nothing decodes on the clients between the stall and the server's return
    tl = res.timeline
    d_steps = tl[(tl["entity"] == "D0") & (tl["time_s"] > 2.5 + 0.2) & (tl["time_s"] < up - 0.2)]
    assert len(d_steps) == 0
    assert df["finished"].all()


def test_autoscaler_adds_then_drains_instances():
    d = disagg(p=1, d=1)
    d["workload"].update(num_requests=1500, rate=40.0, input={"dist": "uniform", "min": 1000, "max": 3000})
    d["autoscaler"] = {"policy": "queue", "params": {"role": "prefill", "target_waiting": 2, "max_count": 3},
                       "interval_s": 2.0}
    d["faults"] = {"restart": FAST_RESTART}
    res = run(d)
    kinds = [e["kind"] for e in events(res)]
    assert "starting" in kinds and "up" in kinds
    assert res.requests["finished"].all()
    st = res.record.stats
    assert st["allocated_gpu_hours"] >= st["gpu_hours"] > 0


def test_schedule_autoscaler_scales_expert_servers_by_single_gpus():
    d = _eaas(servers=16, replicas=2)
    d["workload"].update(num_requests=200, rate=5.0)
    d["autoscaler"] = {"policy": "schedule", "params": {"expert_servers": [[5.0, 18], [20.0, 17]]}, "interval_s": 1.0}
    d["faults"] = {"restart": FAST_RESTART}
    res = run(d)
    alloc = [g for _t, g in res.record.stats["allocated_gpus"]]
    assert max(alloc) - alloc[0] == 2  # two single-GPU servers added
    assert res.requests["finished"].all()
