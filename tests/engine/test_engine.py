"""The real engine in the test suite: vLLM's CPU build serving the tiny Llama on 127.0.0.1.

`pdsim replay` records a short Poisson run against it and `pdsim validate` compares the scenario
of workloads/scenarios/cpu-vllm-tiny-llama.yaml with it, end to end through the CLI (about 2
minutes with the server's start-up on 2 cores). The CPU validation proper re-measures the profile
on the machine at hand before it records and compares (``validation/cpu-vllm/here.py``: a few
minutes on a host with bf16 GEMM units, about ten without). Skips, saying why, where
.ci/engine.sh has not built the engine.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from builders import free_port, load_script

from .paths import MODEL, PYTHON, missing
from .roundtrip import replay_into, validate_against

pytestmark = [pytest.mark.engine, pytest.mark.skipif(missing() is not None, reason=str(missing()))]
ROOT = Path(__file__).resolve().parents[2]
_port = free_port


def test_model_yaml_matches_the_generator():
    mk = load_script(Path(__file__).with_name("make_tiny_llama.py"))
    m = yaml.safe_load((ROOT / "workloads/models/tiny-llama.yaml").read_text())
    cfg = json.loads((MODEL / "config.json").read_text())
    assert (m["num_layers"], m["hidden"], m["vocab"], m["num_heads"], m["num_kv_heads"], m["ffn"]) == (
        cfg["num_hidden_layers"], cfg["hidden_size"], cfg["vocab_size"], cfg["num_attention_heads"],
        cfg["num_key_value_heads"], cfg["intermediate_size"]) == (
        mk.SHAPE["num_hidden_layers"], mk.SHAPE["hidden_size"], mk.SHAPE["vocab_size"],
        mk.SHAPE["num_attention_heads"], mk.SHAPE["num_key_value_heads"], mk.SHAPE["intermediate_size"])


def test_replay_then_validate_against_vllm(tmp_path):
    from pdsim.replay.local_server import VLLMServer

    with VLLMServer(PYTHON, MODEL, _port(), log=tmp_path / "vllm.log") as srv:
        ing = replay_into(srv.url, tmp_path, 40, "engine-test")
    req = ing.record.requests
    assert ing.record.meta["server_version"].startswith("vLLM")
    assert ing.record.meta["engine_counters"]["generation_tokens_total"] == req["output_len"].sum()
    validate_against(tmp_path, "workloads/scenarios/cpu-vllm-tiny-llama.yaml", 40)


def test_pd_through_shared_storage_then_validate(tmp_path):
    """1P1D on the real engine: P and D vLLM servers with ExampleConnector (kv_both, one folder),
    pdsim's P/D proxy in front; D loads every request's KV from P's files ("External Cache
    Hit!"), the replay records every token, and validate runs the 1P1D scenario on the same
    requests (shared-storage transport)."""
    import sys

    from pdsim.cli import main
    from pdsim.ingest import read_run
    from pdsim.replay.local_server import ENGINE_ARGS, PREFILL_ARGS, PDProxy, VLLMServer, shared_storage_args

    kv = shared_storage_args(tmp_path / "kv")
    wl = tmp_path / "wl.yaml"
    wl.write_text(yaml.safe_dump({"kind": "synthetic", "num_requests": 12, "rate": 2, "arrival": "poisson",
                                  "input": {"dist": "uniform", "min": 200, "max": 600},
                                  "output": {"dist": "uniform", "min": 8, "max": 32}}))
    out = tmp_path / "real"
    p_port, d_port, x_port = _port(), _port(), _port()
    with VLLMServer(PYTHON, MODEL, p_port, args=PREFILL_ARGS + kv, env={"VLLM_CPU_OMP_THREADS_BIND": "0"},
                    log=tmp_path / "p.log") as p, \
            VLLMServer(PYTHON, MODEL, d_port, args=ENGINE_ARGS + kv, env={"VLLM_CPU_OMP_THREADS_BIND": "1"},
                       log=tmp_path / "d.log") as d, \
            PDProxy(sys.executable, p.url, d.url, x_port) as proxy:
        rc = main(["replay", str(wl), "--endpoint", proxy.url, "--out", str(out), "--no-progress", "--seed", "11",
                   "--name", "engine-pd"])
    assert rc == 0
    saved = [f for f in (tmp_path / "kv").rglob("*") if f.is_file()]
    assert saved, "P saved no KV files"
    assert (tmp_path / "d.log").read_text(errors="replace").count("External Cache Hit!") >= 12
    ing = read_run(out)
    req = ing.record.requests
    assert len(ing.record) == 12 and all(x is None for x in req["drop_reason"])
    assert (req["output_tokens"] == req["output_len"]).all()
    vout = tmp_path / "val"
    rc = main(["validate", str(out), "--scenario", str(ROOT / "workloads/scenarios/cpu-vllm-tiny-llama-1p1d.yaml"),
               "--out", str(vout), "--tolerance", "output_throughput=0.5"])
    assert rc in (0, 3) and (vout / "validation.html").is_file()
    summ = json.loads((vout / "summaries.json").read_text())
    assert summ["real"]["completed"] == summ["simulated"]["completed"] == 12


def test_remeasure_then_record_and_validate_here(tmp_path):
    """The CPU validation on the machine at hand (validation/cpu-vllm/here.py): the profile is
    re-measured (bounded), the engine recorded at a light load and near the knee with the client
    off the worker's core, and each recording validated against the fresh profile. A profile and
    a recording only meet when they come from one machine."""
    import subprocess
    import sys

    from pdsim.specs.catalog import load_hardware_ref
    from pdsim.specs.machine import cpu_model, cores

    pdir, cases = tmp_path / "profile", tmp_path / "cases"
    out = subprocess.run([sys.executable, str(ROOT / "validation/cpu-vllm/here.py"), "--python", str(PYTHON),
                          "--model", str(MODEL), "--cases", str(cases), "--profile-dir", str(pdir),
                          "--prefix", "ci", "--requests", "12", "16", "--port", str(_port()),
                          # the flow, not the fit's range: here.py's default adds 32 x 2,048-token runs
                          "--remeasure-args", "--repeat 5 --batches 1 4 16 --prompts 32 512 --output-tokens 48 "
                                              "--repeats 3"],
                         capture_output=True, text=True, cwd=ROOT, timeout=1500,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    print(out.stdout[-3000:])  # the per-case errors, in the CI log
    hw = load_hardware_ref(str(pdir / "cpu-epyc-2c.yaml"))
    assert hw.machine["cpu_model"] == cpu_model() and hw.machine["cores"] == cores()
    assert "cpu_flags" in hw.machine  # the ISA decides bf16 GEMM speed 50x over: recorded
    host = json.loads((pdir / "host_overheads.json").read_text())
    # the host fit holds on this machine (2026-11-26: every row within 19%; 0.5 leaves room for a busy host)
    assert all(abs(r["fit_error"]) < 0.5 for r in host["rows"]), host["rows"]
    info = json.loads((pdir / "here.json").read_text())
    assert set(info["cases"]) == {"ci-light", "ci-knee"} and info["capacity_rps"] > 0
    for name, errs in info["cases"].items():
        case = yaml.safe_load((cases / name / "case.yaml").read_text())
        assert any(s.startswith("hardware=") for s in case["set"])  # validated against the fresh profile
        assert all(e == e for e in errs.values()), errs  # every gated metric compared (no NaN)


def test_step_trace_of_a_real_server_adds_up(tmp_path):
    """calibration/microbench/vllm_step_trace.py against vLLM itself: every prompt's chunks add up
    to its length, every step's tokens are its chunks plus its decodes, and every output token
    but the first (the last chunk samples it) is one decode of one step."""
    import sys

    import numpy as np

    from pdsim.replay import ReplayConfig, replay
    from pdsim.replay.local_server import VLLMServer
    from pdsim.workload.table import RequestTable

    sys.path.insert(0, str(ROOT / "calibration" / "microbench"))
    import vllm_step_trace as vst

    inputs, outputs = np.array([700, 90, 300, 1500, 40, 520]), np.array([12, 30, 8, 5, 20, 16])
    trace = tmp_path / "steps.jsonl"
    with VLLMServer(PYTHON, MODEL, _port(), log=tmp_path / "vllm.log", env=vst.trace_env(trace)) as srv:
        rec = replay(RequestTable(np.linspace(0, 1.0, 6), inputs, outputs, max_concurrency=6),
                     ReplayConfig(srv.url, seed=5), name="trace-test")
    assert (rec.requests["output_tokens"] == outputs).all()
    steps, calls = vst.read_trace(trace)
    chunks = [c for s in steps for c in s["prefill_chunks"]]
    assert sorted(c["prompt"] for c in chunks if c["computed"] + c["tokens"] == c["prompt"]) == sorted(inputs)
    assert sum(c["tokens"] for c in chunks) == inputs.sum()  # no prefix hits: fresh random prompts
    assert all(s["total_tokens"] == s["prefill_tokens"] + s["decodes"] <= 512 for s in steps)
    assert sum(s["decodes"] for s in steps) == (outputs - 1).sum()
    assert all(s["t_schedule"] <= s["t_scheduled"] <= s["t_model_done"] <= s["t_end"] for s in steps)
    assert {c["call"] for c in calls} == {"execute_model", "sample_tokens"}
