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


def test_a_missing_or_malformed_trace_gets_one_line_and_exit_2(tmp_path):
    import subprocess
    import sys

    (tmp_path / "t.jsonl.123").write_text("garbage{\n")
    for script, args in (("validation/cpu-vllm-pd/pd_trace.py", ["--trace", str(tmp_path)]),  # no host-light.json
                         ("validation/cpu-vllm/step_compare.py", ["--trace", str(tmp_path / "t.jsonl")])):
        p = subprocess.run([sys.executable, str(REPO / script), *args], capture_output=True, text=True, cwd=REPO)
        assert p.returncode == 2, (script, p.stderr[-300:])
        assert p.stderr.startswith("error: ") and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr
