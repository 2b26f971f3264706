"""Per-step ground truth from a running vLLM V1 server: what its scheduler put in each step, and when.

Nothing in the vLLM install is modified. ``trace_env(path)`` returns the environment a server is
started with: a temporary folder on ``PYTHONPATH`` whose ``sitecustomize.py`` loads this file in
every Python process of the server (API server, engine core, worker) and installs an import hook.
When vLLM's own modules load, the hook wraps, in the process that runs them:

- ``vllm.v1.core.sched.scheduler.Scheduler.schedule`` and ``.update_from_output`` (engine core):
  one JSONL row per step (``kind: "step"``) with the wall times of the schedule's start and end,
  of the model output's arrival (``update_from_output`` starts) and of the step's end, and what the
  step carried: running decodes and their summed context, each prefill chunk (tokens, tokens
  computed before it, prompt length), total scheduled tokens, preemptions, requests waiting;
- ``vllm.v1.worker.gpu_model_runner.GPUModelRunner.execute_model`` / ``.sample_tokens`` (the CPU
  model runner inherits both; worker process): one row per call (``kind: "worker"``) with its
  start and end, so a step's time splits into engine-core host work, the hop to the worker and
  back, and the worker's own time.

Times are ``time.monotonic()`` seconds (one clock for every process of the host) and
``time.time()`` for the first row of each process, to align with a client's recording. Each
process appends to ``<path>.<pid>``; ``read_trace(path)`` merges them. Used only when asked
(``validation/cpu-vllm/here.py --trace-steps FILE``).

vLLM 0.32 on CPU (read from its sources): ``platforms/cpu.py`` sets ``async_scheduling = False``,
so the engine core runs ``EngineCore.step``: schedule, ship the batch to the worker, wait, then
``update_from_output`` (detokenisation happens in the API server, not here);
``long_prefill_token_threshold`` defaults to 0 (``config/scheduler.py``), so a waiting prompt takes
``min(remaining prompt, token budget left)`` and several prompts can share one step's
``max_num_batched_tokens``.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

ENV_VAR = "PDSIM_VLLM_STEP_TRACE"
SCHEDULER_MODULE = "vllm.v1.core.sched.scheduler"
RUNNER_MODULE = "vllm.v1.worker.gpu_model_runner"


def describe_step(out, requests: dict) -> dict:
    """What one ``SchedulerOutput`` carries, from the request objects after ``schedule`` returned.

    ``schedule`` has already advanced each scheduled request's ``num_computed_tokens`` by its
    scheduled tokens, so the tokens computed before this step are ``num_computed_tokens - n``; a
    request whose computed tokens before the step are below its prompt length is a prefill chunk,
    the others decode (one token each without speculation)."""
    decodes, decode_ctx, chunks = 0, 0, []
    for rid, n in out.num_scheduled_tokens.items():
        req = requests.get(rid)
        if req is None:
            raise KeyError(f"scheduled request {rid!r} is not in the scheduler's requests")
        before = int(req.num_computed_tokens) - int(n)
        if before < int(req.num_prompt_tokens):
            chunks.append({"tokens": int(n), "computed": before, "prompt": int(req.num_prompt_tokens)})
        else:
            decodes += 1
            decode_ctx += before
    return {"decodes": decodes, "decode_ctx": decode_ctx, "prefill_chunks": chunks,
            "prefill_tokens": sum(c["tokens"] for c in chunks),
            "total_tokens": int(out.total_num_scheduled_tokens),
            "preempted": len(getattr(out, "preempted_req_ids", None) or ()),
            "finished": len(getattr(out, "finished_req_ids", None) or ())}


class _Writer:
    """Appends rows to ``<base>.<pid>``; the pid is read at each write, because vLLM may fork its
    engine core and worker after this object was made."""

    def __init__(self, base: str):
        self.base, self.pid, self.f = base, None, None

    def write(self, row: dict) -> None:
        if self.pid != os.getpid():
            self.pid = os.getpid()
            self.f = open(f"{self.base}.{self.pid}", "a", buffering=1)
            self.f.write(json.dumps({"kind": "clock", "pid": os.getpid(), "monotonic": time.monotonic(),
                                     "wall": time.time()}) + "\n")
        self.f.write(json.dumps(row) + "\n")


def wrap_scheduler(cls, writer: _Writer) -> None:
    """Wrap ``cls.schedule`` and ``cls.update_from_output`` so each step writes one row."""
    schedule, update = cls.schedule, cls.update_from_output

    def traced_schedule(self, *a, **k):
        t0 = time.monotonic()
        out = schedule(self, *a, **k)
        t1 = time.monotonic()
        row = {"kind": "step", "t_schedule": t0, "t_scheduled": t1, "running": len(self.running),
               "waiting": len(self.waiting)}
        row.update(describe_step(out, self.requests))
        self._pdsim_trace_row = row
        return out

    def traced_update(self, *a, **k):
        t2 = time.monotonic()
        res = update(self, *a, **k)
        row = getattr(self, "_pdsim_trace_row", None)
        if row is not None:
            row.update(t_model_done=t2, t_end=time.monotonic())
            writer.write(row)
            self._pdsim_trace_row = None
        return res

    cls.schedule, cls.update_from_output = traced_schedule, traced_update


def wrap_runner(cls, writer: _Writer) -> None:
    """Wrap the model runner's ``execute_model`` and ``sample_tokens``: one row per call."""
    for name in ("execute_model", "sample_tokens"):
        orig = getattr(cls, name)

        def traced(self, *a, _orig=orig, _name=name, **k):
            t0 = time.monotonic()
            res = _orig(self, *a, **k)
            writer.write({"kind": "worker", "call": _name, "t0": t0, "t1": time.monotonic()})
            return res

        setattr(cls, name, traced)


def install(base: str) -> None:
    """Install the import hook (called by the generated ``sitecustomize.py``)."""
    import importlib.abc

    writer = _Writer(base)
    patches = {SCHEDULER_MODULE: ("Scheduler", wrap_scheduler), RUNNER_MODULE: ("GPUModelRunner", wrap_runner)}

    class _Hook(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name not in patches:
                return None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None and spec.loader is not None:
                    break
            else:
                return None
            exec_module = spec.loader.exec_module
            cls_name, wrap = patches[name]

            def exec_and_patch(module):
                exec_module(module)
                wrap(getattr(module, cls_name), writer)

            spec.loader.exec_module = exec_and_patch
            return spec

    sys.meta_path.insert(0, _Hook())


def trace_env(path: str | Path) -> dict:
    """Environment entries that make a vLLM server started with them write its step trace to
    ``path`` (+ ``.<pid>`` per process): ``PYTHONPATH`` gains a temporary folder holding the
    ``sitecustomize.py`` that loads this file. The folder ``path`` goes in is made here: a server
    whose worker cannot open its trace dies at its first step (EngineDeadError)."""
    Path(path).resolve().parent.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="vllm-step-trace-"))
    (folder / "sitecustomize.py").write_text(
        "import importlib.util, os\n"
        f"_spec = importlib.util.spec_from_file_location('pdsim_vllm_step_trace', {str(Path(__file__).resolve())!r})\n"
        "_m = importlib.util.module_from_spec(_spec)\n_spec.loader.exec_module(_m)\n"
        f"_m.install(os.environ[{ENV_VAR!r}])\n")
    pp = os.environ.get("PYTHONPATH", "")
    return {"PYTHONPATH": str(folder) + (os.pathsep + pp if pp else ""), ENV_VAR: str(Path(path).resolve())}


def emit_summary(out: dict, json_path: str | None) -> None:
    """Print a trace summary as JSON, and write it to ``json_path`` too when given (the ending of
    step_compare.py, pd_trace.py and stall_trace.py)."""
    text = json.dumps(out, indent=1)
    print(text)
    if json_path:
        Path(json_path).write_text(text + "\n")


def summarise(build, json_path: str | None) -> None:
    """``emit_summary(build(), json_path)``; a missing or malformed trace (``build`` raising OSError
    or ValueError) is one line on stderr and exit status 2 (the ending of pd_trace.py and
    handoff_trace.py)."""
    try:
        out = build()
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    emit_summary(out, json_path)


def read_trace(path: str | Path) -> tuple[list[dict], list[dict]]:
    """The merged (steps, worker calls) of every process's ``<path>.<pid>`` file, each sorted by time
    (pdsim.ingest.vllm_steps.read_step_trace, imported here only: the tracer itself runs inside
    vLLM's processes, which have no pdsim)."""
    from pdsim.ingest.vllm_steps import read_step_trace

    return read_step_trace(path)
