"""calibration/microbench/decode_split.py: a decode step's time split between the engine core and
the model worker, over the decode-only steps of one batch (what the committed measurement in
validation/cpu-vllm-calibration/emr3/decode-split/ found: the context-dependent part of a step is
in the worker's execute_model, 24.6 ms of the 26.3 ms cycle at 32 requests of 2,048 tokens)."""
from __future__ import annotations

import json

from builders import REPO, load_script


def _step(t, decodes, chunks=()):
    return {"t_schedule": t, "t_scheduled": t + 0.0003, "t_model_done": t + 0.0093, "t_end": t + 0.0095,
            "decodes": decodes, "decode_ctx": 100 * decodes, "prefill_chunks": list(chunks)}


def test_split_takes_the_decode_only_steps_of_the_batch():
    ds = load_script("calibration/microbench/decode_split.py")
    steps = [_step(0.00, 4, [{"tokens": 512, "computed": 0, "prompt": 600}])]  # a prefill step: left out
    steps += [_step(0.01 * k, 4) for k in range(1, 6)] + [_step(0.07, 3)]  # a smaller batch: left out
    calls = [{"call": "execute_model", "t0": 0.01 * k + 0.0005, "t1": 0.01 * k + 0.0085} for k in range(1, 6)]
    r = ds.split(steps, calls, 4, 0.0, 1.0)
    assert r["steps"] == 5 and r["cycle_ms"] == 10.0 and r["worker_execute_ms"] == 8.0
    assert r["schedule_ms"] == 0.3 and r["to_worker_and_back_ms"] == 9.0 and r["update_ms"] == 0.2
    assert ds.split(steps, calls, 32, 0.0, 1.0) == {"steps": 0}


def test_the_committed_split_puts_the_context_cost_in_the_worker():
    rows = {(r["batch"], r["prompt_tokens"]): r for r in json.loads(
        (REPO / "validation/cpu-vllm-calibration/emr3/decode-split/split.json").read_text())["rows"]}
    short, long = rows[(32, 32)], rows[(32, 2048)]
    worker = long["worker_execute_ms"] - short["worker_execute_ms"]
    cycle = long["cycle_ms"] - short["cycle_ms"]
    assert worker > 0.9 * cycle > 0  # the engine core's schedule and update grow by well under 1 ms
