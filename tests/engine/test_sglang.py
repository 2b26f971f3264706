"""The second real engine: SGLang on the CPU serving the tiny Llama on 127.0.0.1 (.ci/sglang.sh).

`pdsim replay` records a short Poisson run against it and `pdsim validate` compares the scenario of
workloads/scenarios/cpu-sglang-tiny-llama.yaml with it, end to end through the CLI. The validation
proper re-measures the profile against this engine first (``validation/cpu-vllm/here.py --engine
sglang``). Skips, saying why, where .ci/sglang.sh has not built the venv.
"""
from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
import yaml

from .paths import SGLANG_MODEL, SGLANG_PYTHON, sglang_missing

pytestmark = [pytest.mark.engine, pytest.mark.skipif(sglang_missing() is not None, reason=str(sglang_missing()))]
ROOT = Path(__file__).resolve().parents[2]


def _port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def test_replay_then_validate_against_sglang(tmp_path):
    from pdsim.cli import main
    from pdsim.ingest import read_run
    from pdsim.replay.local_server import SGLangServer, group_processes

    wl = tmp_path / "wl.yaml"
    wl.write_text(yaml.safe_dump({"kind": "synthetic", "num_requests": 30, "rate": 4, "arrival": "poisson",
                                  "input": {"dist": "uniform", "min": 64, "max": 512},
                                  "output": {"dist": "uniform", "min": 16, "max": 64}}))
    out = tmp_path / "real"
    with SGLangServer(SGLANG_PYTHON, SGLANG_MODEL, _port(), log=tmp_path / "sglang.log") as srv:
        # the scheduler (and the model's forward) on the first CPU, every thread of it
        assert srv.scheduler_pids
        for pid in srv.scheduler_pids:
            assert all(os.sched_getaffinity(int(t)) == {0} for t in os.listdir(f"/proc/{pid}/task"))
        assert any("sglang::detokenizer" in title for _, title in group_processes(srv.proc.pid))
        rc = main(["replay", str(wl), "--endpoint", srv.url, "--out", str(out), "--no-progress", "--seed", "7",
                   "--name", "sglang-engine-test"])
    assert rc == 0
    log = (tmp_path / "sglang.log").read_text()
    assert "Prefill batch" in log and "Decode batch" in log  # the engine's own scheduler ran these steps
    ing = read_run(out)
    req = ing.record.requests
    assert ing.format == "pdsim-replay" and len(ing.record) == 30
    assert all(d is None for d in req["drop_reason"]), set(req["drop_reason"])
    assert (req["output_tokens"] == req["output_len"]).all()  # ignore_eos honoured, every token timed
    assert ing.record.meta["server_version"].startswith("SGLang")
    vout = tmp_path / "val"
    rc = main(["validate", str(out), "--scenario", str(ROOT / "workloads/scenarios/cpu-sglang-tiny-llama.yaml"),
               "--out", str(vout), "--tolerance", "output_throughput=0.5"])
    assert rc in (0, 3) and (vout / "validation.html").is_file()
    summ = json.loads((vout / "summaries.json").read_text())
    assert summ["real"]["completed"] == summ["simulated"]["completed"] == 30
