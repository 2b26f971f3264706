"""The bundled failure examples of issue 14 in reduced form: ten GPUs failing one minute apart
stop a monolithic EP64 group again and again, cost TP16 units one unit at a time, and leave an
expert service with replicas serving; a P/D deployment rides out the loss of a decode node."""
from __future__ import annotations

import pdsim


def _run(key: str, *sets: str):
    return pdsim.simulate(pdsim.load_scenario(key, list(sets)))


def test_expert_service_survives_what_stops_an_ep_group():
    few = ("workload.num_requests=6000",)
    goodput = {d: _run(f"dsr1-h800-decode64-{d}", *few).summary()["goodput_share"]
               for d in ("monolithic", "tp16", "eaas")}
    assert goodput["eaas"] > 0.95
    assert goodput["eaas"] >= goodput["tp16"] > goodput["monolithic"]
    assert goodput["monolithic"] < 0.6


def test_pd_deployment_loses_a_decode_node_and_recovers():
    res = _run("dsv3-h800-pd-node-loss", "workload.trace.time_scale=0.25", "workload.trace.limit=4000",
               "faults.events=[{at_s: 300, kill: node, node: 8, recover_after_s: 60}]")
    kinds = [e["kind"] for e in res.record.stats["events"]]
    assert kinds[:3] == ["failed", "detected", "restarting"] and "up" in kinds
    df = res.requests
    assert df["finished"].all()
    assert res.record.stats["retries_by_cause"].get("decode_node_failed", 0) > 0
