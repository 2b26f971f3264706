"""Analytic checks where queueing theory gives the answer."""
from __future__ import annotations

import numpy as np

import pdsim

from builders import resolve, scenario_dict


def _md1_run(rho: float, n: int, seed: int):
    d = scenario_dict("colocated", seed=seed)
    d["cluster"]["colocated"][0]["engine"].update(max_running_requests=1, chunked_prefill_size=-1,
                                                   max_prefill_tokens=4096)
    d["workload"].update(num_requests=n, input={"dist": "fixed", "value": 512}, output={"dist": "fixed", "value": 1})
    # deterministic service time S of one 512-token prefill on this instance
    sc = resolve(d)
    from pdsim.costs import build_step_cost

    g = sc.scenario.cluster.colocated[0]
    S = build_step_cost("roofline", sc.hardware, sc.model, g, "colocated").step_time(512, 512 * 256.0, 1, 0, 0)
    d["workload"]["rate"] = rho / S
    d["cost_model"] = "roofline"
    res = pdsim.simulate(resolve(d))
    return res.requests, S


def test_md1_mean_wait_matches_pollaczek_khinchine():
    rho = 0.7
    waits = []
    for seed in (11, 12, 13):
        df, S = _md1_run(rho, 20_000, seed)
        waits.append(df["queue_s"].mean())
    expected = rho * S / (2 * (1 - rho))  # M/D/1: Wq = rho S / (2 (1 - rho))
    got = float(np.mean(waits))
    assert abs(got - expected) / expected < 0.04, (got, expected)
    # service is deterministic: every prefill takes exactly S
    assert np.allclose(df["prefill_s"], S)


def test_light_load_has_no_queueing():
    df, S = _md1_run(0.01, 300, 5)
    assert df["queue_s"].quantile(0.9) < 1e-9
