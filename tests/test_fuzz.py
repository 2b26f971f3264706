"""Property suite over random scenarios and workloads (tests/strategies.py).

Runs with a small fixed budget in every test run; ``pytest -m fuzz`` runs the same properties
with a long budget (the hypothesis profile "fuzz", tests/conftest.py). Every simulated world
also checks its own conservation laws at the end (PDSIM_CHECK=1 in tests/conftest.py): requests
in = finished + dropped with a reason; all KV pages, queues, batches, buffers and flows empty
(no KV leak). Every example must end within a wall-clock bound (a watchdog: a run that hangs
fails the example instead of the suite) and within a number of engine steps bounded by its work.
The strategies draw faults (timeline, random, plug-in), autoscalers, expert services, replicas,
overheads, priority classes, every scheduler and every transport.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from hypothesis import given

import pdsim

from builders import REPO, resolve, watchdog
from strategies import scenarios, timestamps_in_order

pytestmark = pytest.mark.fuzz_budget  # small budget by default, long under -m fuzz (conftest.py)


#: wall seconds one example may take before it counts as a hang (the slowest examples of the
#: strategies take a few seconds on a loaded 2-core machine)
WATCHDOG_S = 120




def _work_bound(df, record) -> int:
    """Engine steps a run may take: every step advances at least one token of prefill or
    decode; a request is sent again at most ``retries`` times, recomputed at most
    max_retractions (+1 for a lost KV) times, and a failure cuts at most one step short."""
    tokens = int(((df["input_len"] + df["output_len"]) * (1 + df["retries"])).sum())
    tokens += int(df["recompute_tokens"].sum())
    failures = sum(1 for e in record.stats.get("events", ()) if e["kind"] == "failed")
    return (tokens + len(df)) * 34 + 100 + failures


@given(scenarios())
def test_conservation_order_capacity_and_termination(d):
    assert os.environ.get("PDSIM_CHECK") == "1"  # the world checks conservation and KV leaks itself
    with watchdog(WATCHDOG_S):
        res = pdsim.simulate(resolve(d))
    df = res.requests
    n = d["workload"]["num_requests"]
    assert len(df) == n and df["request_id"].tolist() == list(range(n))
    # every request finished or carries a reason; never "stuck"
    assert df.loc[~df["finished"], "drop_reason"].notna().all()
    assert "stuck" not in set(df["drop_reason"].dropna())
    if "duration_limit_s" not in d and "faults" not in d:
        assert not set(df["drop_reason"].dropna()) & {"unfinished_at_end", "not_arrived_by_end"}
    assert not timestamps_in_order(df), timestamps_in_order(df)
    fin = df[df["finished"]]
    assert (fin["ttft_s"] >= 0).all() and (res.itls >= 0).all()
    assert (fin["tpot_s"].dropna() >= 0).all()
    for inst in res.record.instances:
        assert inst.kv_peak_pages <= inst.kv_capacity_pages
    assert res.record.events <= _work_bound(df, res.record)
    # tokens: decode steps produce exactly the tokens after each finished request's first token,
    # plus those of requests retracted or cut off on the way
    produced = sum(i.tokens_out for i in res.record.instances)
    assert produced >= int((fin["output_len"] - 1).sum())


@given(scenarios(allow_moe=False))
def test_same_seed_same_table_in_another_process(d):
    """Determinism across processes (another hash seed): the request table is identical."""
    here = pdsim.simulate(resolve(d)).requests
    code = ("import json,sys; sys.path.insert(0, 'tests'); import pdsim; from builders import resolve; "
            "d = json.loads(sys.stdin.read()); "
            "print(pdsim.simulate(resolve(d)).requests.to_json(orient='split', double_precision=15))")
    env = dict(os.environ, PYTHONHASHSEED=str(len(json.dumps(d)) % 97 + 1))
    r = subprocess.run([sys.executable, "-c", code], input=json.dumps(d), capture_output=True, text=True,
                       cwd=REPO, env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    import pandas as pd
    there = pd.read_json(__import__("io").StringIO(r.stdout), orient="split")
    mine = pd.read_json(__import__("io").StringIO(here.to_json(orient="split", double_precision=15)), orient="split")
    pd.testing.assert_frame_equal(mine, there)
