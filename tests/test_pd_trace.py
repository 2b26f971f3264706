"""The 1P1D trace summary (validation/cpu-vllm-pd/pd_trace.py) on the committed traced recording:
every prompt P prefilled is found again as D's tail step, after P's step ended."""
from __future__ import annotations

import importlib.util

from builders import REPO

TRACE = REPO / "validation/cpu-vllm-calibration/here/step-traces/pd-light"


def _module():
    spec = importlib.util.spec_from_file_location("pd_trace", REPO / "validation/cpu-vllm-pd/pd_trace.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_traced_1p1d_run_adds_up():
    out = _module().analyse(TRACE, "light", str(REPO / "validation/cpu-vllm-calibration/here/cpu-epyc-2c.yaml"))
    assert out["matched"] == "40 of 40"  # 40 requests, each prefilled once by P, its tail once by D
    assert out["handoff_gap_ms"]["p10"] > 0  # D's step starts after P's ended
    assert out["p_host_ms_around_worker"]["p10"] >= 0  # the worker's calls lie inside P's steps
    assert 0 < out["worker_busy_share"]["P"] < out["worker_busy_share"]["D"] < 1
    procs = out["host"]["placement"]
    assert any(k.startswith("P:VLLM::Worker") and v["affinity"] == [0] for k, v in procs.items())
    assert any(k.startswith("D:VLLM::Worker") and v["affinity"] == [1] for k, v in procs.items())
