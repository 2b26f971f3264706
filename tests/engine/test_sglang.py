"""The second real engine: SGLang on the CPU serving the tiny Llama on 127.0.0.1 (.ci/sglang.sh).

`pdsim replay` records a short Poisson run against it and `pdsim validate` compares the scenario of
workloads/scenarios/cpu-sglang-tiny-llama.yaml with it, end to end through the CLI. The validation
proper re-measures the profile against this engine first (``validation/cpu-vllm/here.py --engine
sglang``). Skips, saying why, where .ci/sglang.sh has not built the venv.
"""
from __future__ import annotations

import os
import time

import pytest
from builders import free_port

from .paths import SGLANG
from .roundtrip import replay_into, validate_against

pytestmark = [pytest.mark.engine, pytest.mark.skipif(SGLANG.missing() is not None, reason=str(SGLANG.missing()))]


def test_replay_then_validate_against_sglang(tmp_path):
    from pdsim.replay.local_server import SGLangServer, session_processes

    with SGLangServer(SGLANG.python, SGLANG.model, free_port(), log=tmp_path / "sglang.log") as srv:
        # the scheduler (and the model's forward) on the first CPU, every thread of it
        assert srv.scheduler_pids
        for pid in srv.scheduler_pids:
            assert all(os.sched_getaffinity(int(t)) == {0} for t in os.listdir(f"/proc/{pid}/task"))
        # comm (15 bytes), set by the detokenizer process itself: it may rename after the server answers
        deadline = time.monotonic() + 15
        while "sglang::detoken" not in (names := set(session_processes(srv.proc.pid).values())):
            assert time.monotonic() < deadline, f"no sglang::detoken process in the server's session: {names}"
            time.sleep(0.2)
        ing = replay_into(srv.url, tmp_path, 30, "sglang-engine-test")
    log = (tmp_path / "sglang.log").read_text()
    assert "Prefill batch" in log and "Decode batch" in log  # the engine's own scheduler ran these steps
    assert ing.record.meta["server_version"].startswith("SGLang")
    validate_against(tmp_path, "workloads/scenarios/cpu-sglang-tiny-llama.yaml", 30)
