"""A request given up while the proxy's P -> D hop of the 1P1D hand-off runs (issue 24 item 5,
transports/shared_storage.py, world.handoff): D gives P's files back at once (review3: they were
given back only when the hop ended, so a run whose last request was given up mid-hop ended with
D's file store still holding them: "receive buffer holds {'file': 1310720.0}")."""
from __future__ import annotations

import numpy as np
import pytest

from pdsim import api
from pdsim.workload.table import RequestTable

from builders import REPO

PD = REPO / "workloads/scenarios/cpu-vllm-tiny-llama-1p1d.yaml"


def _run(sets):
    table = RequestTable(np.zeros(1), np.full(1, 700), np.full(1, 20), source="t")
    return api.simulate(api.load_scenario(PD, ["host.unpinned={}"] + sets), table=table).requests


@pytest.mark.parametrize("policy, reason", [("drop", "timeout"), ("restart", "timeout_after_retries")])
def test_a_request_given_up_during_the_handoff_hop_leaves_no_files_behind(monkeypatch, policy, reason):
    monkeypatch.setenv("PDSIM_CHECK", "1")  # conservation: D's file store empty at the end
    r = _run([])
    routed, written, at_d = (float(r[c][0]) for c in ("routed_s", "transfer_end_s", "decode_admit_s"))
    assert at_d - written > 1e-3  # the hop: router_ms's halves between P's answer and D
    timeout = (written + at_d) / 2 - routed  # the client gives up halfway through the hop
    q = _run([f"faults={{request_timeout_s: {timeout}, retry: {{policy: {policy}, max_retries: 1}}}}"])
    assert q["drop_reason"].tolist() == [reason] and np.isnan(q["decode_admit_s"][0])


def test_a_hop_whose_work_ended_as_the_world_stopped_ends_now():
    """The world stops (its last request done) between a front hop's job finishing on the cores and
    the front serving the next: the way-out accounting asks when the hops end (world.egress_extras);
    it raised "the job is already done" / "the hop is already done" instead of answering now (and
    the queued one after it). Reachable: a hop and the last step on one core end in the same
    HostCores._complete."""
    import simpy

    from pdsim.sim.host_cores import HostCores
    from pdsim.sim.host_front import SerialFront

    env = simpy.Environment()
    front = SerialFront(HostCores(env, 2, {}))
    a, b = front.hop(0.02), front.hop(0.03)
    while not a.job.done.triggered:  # the cores' completion processed, the front's not yet
        env.step()
    assert not a.done.triggered
    assert front.finish_time(a) == pytest.approx(0.02, rel=1e-12)
    assert front.finish_time(b) == pytest.approx(0.05, rel=1e-12)
    while not a.done.triggered:  # the front moved on, a's callbacks (world._out_done) not yet run
        env.step()
    assert not a.done.processed and front.finish_time(a) == pytest.approx(0.02, rel=1e-12)
