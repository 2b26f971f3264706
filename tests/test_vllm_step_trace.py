"""The vLLM step tracer (calibration/microbench/vllm_step_trace.py) without the engine: a fake
``vllm`` package with the same module paths and method names, loaded in a fresh interpreter
through the ``sitecustomize.py`` that ``trace_env`` writes."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "calibration" / "microbench"))
import vllm_step_trace as vst  # noqa: E402

FAKE_SCHEDULER = """
from types import SimpleNamespace

class Scheduler:
    # as vLLM's: schedule() advances num_computed_tokens by the scheduled tokens before returning
    def __init__(self):
        self.requests = {"a": SimpleNamespace(num_computed_tokens=700, num_prompt_tokens=600),
                         "b": SimpleNamespace(num_computed_tokens=0, num_prompt_tokens=900)}
        self.running, self.waiting = list(self.requests.values()), []

    def schedule(self):
        sched = {"a": 1, "b": 511}
        for rid, n in sched.items():
            self.requests[rid].num_computed_tokens += n
        return SimpleNamespace(num_scheduled_tokens=sched, total_num_scheduled_tokens=512,
                               preempted_req_ids=set(), finished_req_ids={"z"})

    def update_from_output(self, out, model_output):
        return {"done": model_output}
"""

FAKE_RUNNER = """
class GPUModelRunner:
    def execute_model(self, out):
        return None

    def sample_tokens(self, grammar):
        return "tokens"
"""


def _fake_vllm(root: Path) -> None:
    for mod, src in (("vllm/v1/core/sched/scheduler.py", FAKE_SCHEDULER),
                     ("vllm/v1/worker/gpu_model_runner.py", FAKE_RUNNER)):
        path = root / mod
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(src))
        for d in path.relative_to(root).parents:
            if str(d) != ".":
                (root / d / "__init__.py").touch()


def test_describe_step_splits_decodes_from_prefill_chunks():
    out = SimpleNamespace(num_scheduled_tokens={"d1": 1, "d2": 1, "p": 300, "q": 210},
                          total_num_scheduled_tokens=512, preempted_req_ids={"x"}, finished_req_ids=set())
    reqs = {"d1": SimpleNamespace(num_computed_tokens=801, num_prompt_tokens=600),    # decode at 800
            "d2": SimpleNamespace(num_computed_tokens=401, num_prompt_tokens=400),    # first decode
            "p": SimpleNamespace(num_computed_tokens=812, num_prompt_tokens=1000),    # middle chunk
            "q": SimpleNamespace(num_computed_tokens=210, num_prompt_tokens=210)}     # whole prompt
    row = vst.describe_step(out, reqs)
    assert row["decodes"] == 2 and row["decode_ctx"] == 800 + 400
    assert row["prefill_chunks"] == [{"tokens": 300, "computed": 512, "prompt": 1000},
                                     {"tokens": 210, "computed": 0, "prompt": 210}]
    assert row["prefill_tokens"] == 510 and row["total_tokens"] == 512 and row["preempted"] == 1


def test_describe_step_names_an_unknown_request():
    out = SimpleNamespace(num_scheduled_tokens={"gone": 1}, total_num_scheduled_tokens=1)
    with pytest.raises(KeyError, match="gone"):
        vst.describe_step(out, {})


def test_trace_env_wraps_fake_vllm_in_a_fresh_interpreter(tmp_path):
    _fake_vllm(tmp_path / "site")
    # into a folder not made yet (here.py --trace-steps DIR/trace): the worker must find it there,
    # or it dies at its first step and takes the server with it (EngineDeadError)
    env = vst.trace_env(tmp_path / "not-yet" / "trace.jsonl")
    env["PYTHONPATH"] += ":" + str(tmp_path / "site")
    code = ("from vllm.v1.core.sched.scheduler import Scheduler\n"
            "from vllm.v1.worker.gpu_model_runner import GPUModelRunner\n"
            "s = Scheduler(); out = s.schedule(); assert s.update_from_output(out, 7) == {'done': 7}\n"
            "r = GPUModelRunner(); r.execute_model(out); assert r.sample_tokens(None) == 'tokens'\n")
    r = subprocess.run([sys.executable, "-c", code], env={"PATH": "/usr/bin:/bin", **env},
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    steps, calls = vst.read_trace(tmp_path / "not-yet" / "trace.jsonl")
    assert len(steps) == 1
    s = steps[0]
    assert s["decodes"] == 1 and s["decode_ctx"] == 700
    assert s["prefill_chunks"] == [{"tokens": 511, "computed": 0, "prompt": 900}]
    assert s["running"] == 2 and s["finished"] == 1
    assert s["t_schedule"] <= s["t_scheduled"] <= s["t_model_done"] <= s["t_end"]
    assert [c["call"] for c in calls] == ["execute_model", "sample_tokens"]


def test_read_trace_refuses_a_missing_trace_and_a_bad_row(tmp_path):
    with pytest.raises(FileNotFoundError, match="no step-trace files"):
        vst.read_trace(tmp_path / "t.jsonl")
    (tmp_path / "t.jsonl.12").write_text('{"kind": "clock", "pid": 12}\nnot json\n')
    with pytest.raises(ValueError, match=r"t.jsonl.12:2: not a JSON row"):
        vst.read_trace(tmp_path / "t.jsonl")
    (tmp_path / "t.jsonl.12").write_text('{"kind": "clock", "pid": 12}\n{"kind": "step", "t_schedule": 1}\n')
    with pytest.raises(ValueError, match=r"t.jsonl.12:2: a 'step' row without the field 't_scheduled'"):
        vst.read_trace(tmp_path / "t.jsonl")
    (tmp_path / "t.jsonl.12").write_text('{"kind": "worker", "call": "execute_model", "t0": 1}\n')
    with pytest.raises(ValueError, match=r"t.jsonl.12:1: a 'worker' row without the field 't1'"):
        vst.read_trace(tmp_path / "t.jsonl")
    # a step row whose prefill_chunks is not a list (null from a cut writer) crashed with a TypeError
    whole = {"kind": "step", "t_schedule": 1, "t_scheduled": 1, "t_model_done": 1, "t_end": 1, "decodes": 0,
             "decode_ctx": 0, "prefill_chunks": None, "prefill_tokens": 0, "running": 0, "waiting": 0, "preempted": 0}
    (tmp_path / "t.jsonl.12").write_text(json.dumps(whole) + "\n")
    with pytest.raises(ValueError, match=r"t.jsonl.12:1: a 'step' row whose 'prefill_chunks' is not a list"):
        vst.read_trace(tmp_path / "t.jsonl")


def test_host_share_reads_this_process_and_prices_the_stretch():
    import os

    import host_share

    own = host_share.processes(os.getsid(0))
    assert os.getpid() in own
    a = host_share.snapshot({os.getpid(): "pytest"})
    assert a["procs"][os.getpid()]["run_ns"] > 0 and a["busy_ticks"] > 0
    before = {"procs": {7: {"name": "w", "run_ns": 1_000_000_000, "wait_ns": 0}}, "busy_ticks": 0, "steal_ticks": 0}
    after = {"procs": {7: {"name": "w", "run_ns": 3_000_000_000, "wait_ns": 500_000_000}},
             "busy_ticks": 3 * host_share.TICK, "steal_ticks": host_share.TICK // 10}
    s = host_share.share(before, after, 4.0, 2)
    # 2 s on a CPU and 0.5 s runnable but waiting: stretched 1.25x; 1 s of the machine's busy time was not ours
    assert s["processes"]["w[7]"] == {"cpu_s": 2.0, "wait_s": 0.5, "stretch": 1.25}
    assert s["engine_cpu_s"] == 2.0 and s["other_cpu_s"] == 1.0 and s["steal_s"] == 0.1


def test_read_trace_reads_gzipped_files_as_committed(tmp_path):
    import gzip

    import json

    def step(t):  # a whole step row, as wrap_scheduler writes it
        return json.dumps({"kind": "step", "t_schedule": t, "t_scheduled": t, "t_model_done": t, "t_end": t,
                           "decodes": 1, "decode_ctx": 9, "prefill_chunks": [], "prefill_tokens": 0,
                           "running": 1, "waiting": 0, "preempted": 0}) + "\n"

    row = step(2.0) + '{"kind": "worker", "call": "execute_model", "t0": 1.0, "t1": 1.5}\n'
    (tmp_path / "t.jsonl.5.gz").write_bytes(gzip.compress(row.encode()))
    (tmp_path / "t.jsonl.6").write_text(step(1.0))
    (tmp_path / "t.jsonl.loads.json").write_text("{}")  # not a process's file: left alone
    steps, calls = vst.read_trace(tmp_path / "t.jsonl")
    assert [s["t_schedule"] for s in steps] == [1.0, 2.0] and len(calls) == 1


def test_step_compare_splits_each_cycle_into_host_hop_and_worker(tmp_path):
    import json

    sys.path.insert(0, str(ROOT / "validation" / "cpu-vllm"))
    import step_compare

    def step(t0, t1, t2, t3, dec, pf):
        return {"kind": "step", "t_schedule": t0, "t_scheduled": t1, "t_model_done": t2, "t_end": t3,
                "decodes": dec, "decode_ctx": 0, "prefill_tokens": pf, "running": dec, "waiting": 0, "preempted": 0,
                "prefill_chunks": [{"tokens": pf, "computed": 0, "prompt": pf}] if pf else []}
    rows = [step(0.000, 0.001, 0.501, 0.502, 0, 500),   # a prefill alone
            step(0.503, 0.504, 0.554, 0.555, 4, 0),     # a 53 ms decode cycle of 4 decoders (40-100 ms class)
            step(0.556, 0.557, 0.567, 0.568, 4, 0)]     # a 13 ms one
    calls = [{"kind": "worker", "call": "execute_model", "t0": 0.002, "t1": 0.499},
             {"kind": "worker", "call": "execute_model", "t0": 0.505, "t1": 0.545},
             {"kind": "worker", "call": "execute_model", "t0": 0.558, "t1": 0.565}]
    (tmp_path / "s.jsonl.1").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "s.jsonl.2").write_text("".join(json.dumps(r) + "\n" for r in calls))
    r = step_compare.real_steps(str(tmp_path / "s.jsonl"), None)
    assert r["cycle"][1:] * 1e3 == pytest.approx([53.0, 13.0])
    assert r["host"][1:] * 1e3 == pytest.approx([1.0, 1.0])
    assert r["worker"] * 1e3 == pytest.approx([497.0, 40.0, 7.0])
    assert r["hop"] * 1e3 == pytest.approx([3.0, 10.0, 3.0])
    out = step_compare.summary(r, None)["real"]
    assert out["decode_weighted_cycles"]["40-100"]["gaps"] == 4 and out["decode_weighted_cycles"]["<40"]["gaps"] == 4
    assert out["steps_with_prefill"] == 1


def test_step_compare_reports_each_steps_time_over_its_own_price_by_thirds(tmp_path):
    """``host_speed``: a host that slows under the recording shows as a ratio rising third by third
    while the prices (the same step, priced alike) stay put."""
    import json

    sys.path.insert(0, str(ROOT / "validation" / "cpu-vllm"))
    import step_compare

    class Flat:  # every decode step 10 ms, every prefill step 100 ms, alone
        def step_time(self, prefill_tokens, prefill_attn, prefill_seqs, decode_batch, decode_ctx, **kw):
            return 0.1 if prefill_tokens else 0.01

    rows, t = [], 0.0
    for k in range(30):  # decode steps at 10, 11, then 12 ms: the host slowing by thirds
        d = 0.010 * (1.0 + 0.1 * (k // 10))
        pf = 64 if k % 10 == 5 else 0
        d = 0.1 if pf else d
        rows.append({"kind": "step", "t_schedule": t, "t_scheduled": t, "t_model_done": t + d, "t_end": t + d,
                     "decodes": 1, "decode_ctx": 100, "prefill_tokens": pf, "running": 1, "waiting": 0,
                     "preempted": 0, "prefill_chunks": [{"tokens": pf, "computed": 0, "prompt": pf}] if pf else []})
        t += d + 0.001
    (tmp_path / "s.jsonl.1").write_text("".join(json.dumps(r) + "\n" for r in rows))
    real = step_compare.real_steps(str(tmp_path / "s.jsonl"), None)
    assert real["prefill_attn"][5] == pytest.approx(64 * 32)
    out = step_compare.host_speed(real, step_compare.step_prices(real, Flat()))
    assert out["real_over_price, pure decode"]["median_by_third"] == pytest.approx([1.0, 1.1, 1.2])
    assert out["real_over_price, with prefill"]["median_by_third"] == pytest.approx([1.0, 1.0, 1.0])
