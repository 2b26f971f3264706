"""Shared builders: small scenarios that simulate in milliseconds."""
from __future__ import annotations

import contextlib
import copy
import signal
from pathlib import Path

import pdsim

REPO = Path(__file__).resolve().parents[1]


def scenario_dict(kind: str = "disagg", **over) -> dict:
    """A small Llama-3.1-8B scenario on H100 GPUs; ``kind``: disagg | colocated."""
    eng = {"chunked_prefill_size": 2048, "page_size": 16}
    if kind == "colocated":
        cluster = {"colocated": [{"count": 1, "gpus": 1, "engine": dict(eng)}]}
    else:
        cluster = {"prefill": [{"count": 1, "gpus": 1, "engine": dict(eng)}],
                   "decode": [{"count": 1, "gpus": 1, "engine": dict(eng)}]}
    d = {
        "name": f"small-{kind}", "hardware": "h100", "model": "llama-3.1-8b", "cluster": cluster,
        "workload": {"kind": "synthetic", "num_requests": 60, "rate": 8.0,
                     "input": {"dist": "uniform", "min": 64, "max": 1024},
                     "output": {"dist": "uniform", "min": 1, "max": 64}},
        "slo": {"ttft_ms": 2000, "tpot_ms": 50}, "seed": 1,
    }
    for k, v in over.items():
        d[k] = v
    return d


def resolve(d: dict):
    return pdsim.resolve_scenario(copy.deepcopy(d), "<test>", REPO / "workloads" / "scenarios")







def assert_same_requests(a, b) -> None:
    """Two RunRecords hold the same per-request columns, bit for bit (NaN equal to NaN)."""
    import numpy as np

    for col, va in a.requests.items():
        vb = b.requests[col]
        if va.dtype == object:
            assert list(va) == list(vb), col
        else:
            assert np.array_equal(va, vb, equal_nan=True), col


@contextlib.contextmanager
def watchdog(seconds: int):
    """Fail (TimeoutError) if the block runs longer than ``seconds`` of wall time: a hang."""
    def alarm(_sig, _frame):
        raise TimeoutError(f"the run did not end within {seconds} s: a hang")
    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
