"""vLLM's per-step records, as ``calibration/microbench/vllm_step_trace.py`` writes them inside a
running vLLM V1 server (one JSONL file per process, ``<path>.<pid>``, gzipped as committed).

A ``step`` row is one engine step seen by the scheduler: the wall times of its schedule's start
and end, of the model output's arrival and of the step's end (``t_schedule``, ``t_scheduled``,
``t_model_done``, ``t_end``; ``time.monotonic()`` seconds), and what it carried (``decodes`` and
their summed context ``decode_ctx``, each prefill chunk's ``tokens``, ``computed`` before it and
``prompt`` length, ``prefill_tokens``, ``running``, ``waiting``, ``preempted``). A ``worker`` row
is one model-runner call (``call``, ``t0``, ``t1``). A recording may cover several loads, each a
span of the engine's clock in ``<path>.loads.json[.gz]`` (``validation/cpu-vllm/here.py``).

The tracer runs inside vLLM's processes and imports nothing of pdsim; this is its reader.
"""
from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

# the fields every reader of a trace uses (written by vllm_step_trace's wrap_scheduler / describe_step
# and wrap_runner)
STEP_FIELDS = ("t_schedule", "t_scheduled", "t_model_done", "t_end", "decodes", "decode_ctx", "prefill_chunks",
               "prefill_tokens", "running", "waiting", "preempted")
CHUNK_FIELDS = ("tokens", "computed", "prompt")
WORKER_FIELDS = ("call", "t0", "t1")
_PID_FILE = r"\.\d+(\.gz)?$"  # <path>.<pid>, or gzipped as committed


def trace_files(path: str | Path) -> list[Path]:
    """The files of a recording: ``path`` itself where it is one process's file (``<base>.<pid>[.gz]``),
    else every ``<path>.<pid>[.gz]`` beside it."""
    p = Path(path)
    if p.is_file() and re.search(_PID_FILE, p.name):
        return [p]
    own = re.compile(re.escape(p.name) + _PID_FILE)
    files = sorted(f for f in p.parent.glob(p.name + ".*") if own.match(f.name))
    if not files:
        raise FileNotFoundError(f"{path}: no step-trace files ({p.name}.<pid>) were written")
    return files


def read_step_trace(path: str | Path) -> tuple[list[dict], list[dict]]:
    """The merged (steps, worker calls) of a recording's files (``trace_files``), each sorted by
    time. A step or worker row without a field the readers use is refused (ValueError naming the
    file, line and field); a missing recording is FileNotFoundError."""
    steps, calls = [], []
    for f in trace_files(path):
        text = gzip.decompress(f.read_bytes()).decode() if f.suffix == ".gz" else f.read_text()
        for i, line in enumerate(text.splitlines(), 1):
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{f}:{i}: not a JSON row ({e.msg})") from None
            kind = row.get("kind") if isinstance(row, dict) else None
            need = STEP_FIELDS if kind == "step" else WORKER_FIELDS if kind == "worker" else ()
            for field in need:  # a cut or foreign row: refused here, not a KeyError deep in a summary
                if field not in row:
                    raise ValueError(f"{f}:{i}: a {kind!r} row without the field {field!r}")
            if kind == "step":
                if not isinstance(row["prefill_chunks"], list):
                    raise ValueError(f"{f}:{i}: a 'step' row whose 'prefill_chunks' is not a list")
                for c in row["prefill_chunks"]:
                    for field in CHUNK_FIELDS:
                        if not isinstance(c, dict) or field not in c:
                            raise ValueError(f"{f}:{i}: a prefill chunk without the field {field!r}")
            (steps if kind == "step" else calls if kind == "worker" else []).append(row)
    steps.sort(key=lambda r: r["t_schedule"])
    calls.sort(key=lambda r: r["t0"])
    return steps, calls


def read_spans(path: str | Path) -> dict[str, tuple[float, float]]:
    """The loads a recording covers: name -> (start, end) on the engine's clock, from
    ``<path>.loads.json[.gz]`` (``<base>.loads.json`` for one process's file); {} where there is none."""
    p = Path(path)
    base = p.parent / re.sub(_PID_FILE, "", p.name) if re.search(_PID_FILE, p.name) and p.is_file() else p
    for cand in (Path(f"{base}.loads.json"), Path(f"{base}.loads.json.gz")):
        if cand.is_file():
            raw = gzip.decompress(cand.read_bytes()).decode() if cand.suffix == ".gz" else cand.read_text()
            try:
                doc = json.loads(raw)
            except json.JSONDecodeError as e:
                raise ValueError(f"{cand}: not JSON ({e.msg})") from None
            out = {}
            for k, v in doc.items() if isinstance(doc, dict) else ():
                if isinstance(v, list) and len(v) == 2 and all(isinstance(x, (int, float)) for x in v):
                    out[k] = (float(v[0]), float(v[1]))
            return out
    return {}
