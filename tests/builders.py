"""Shared builders: small scenarios that simulate in milliseconds."""
from __future__ import annotations

import contextlib
import copy
import importlib.util
import signal
import socket
from pathlib import Path

import pdsim

REPO = Path(__file__).resolve().parents[1]


def load_script(rel: str | Path):
    """A script of the repository that is not a package module (calibration/microbench/*.py,
    validation/*/*.py), loaded by its path relative to the repository root (or absolute)."""
    path = REPO / rel
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


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


def fit_cpu_profile(folder: Path, rows: Path, machine: dict | None = None, overhead: dict | None = None) -> Path:
    """Fit a CPU profile the way ``cpu_profile.py profile --fresh`` does, from the four files of a
    re-measurement folder ``rows`` copied into ``folder``, with ``machine`` / ``overhead`` entries
    set (a value None removes the entry; a file already in ``folder`` is kept, so write one there
    first to change it, and a second call edits the first one's): the profile YAML (``folder/p.yaml``; its
    ``host_overheads.json`` beside it)."""
    import argparse
    import json
    import shutil
    import sys

    for f in ("machine.json", "gemm.csv", "attention.csv", "overhead.json"):
        if not (folder / f).exists():
            shutil.copy(rows / f, folder / f)
    for name, edits in (("machine.json", machine), ("overhead.json", overhead)):
        if edits:
            doc = json.loads((folder / name).read_text())
            for k, v in edits.items():
                if v is None:
                    doc.pop(k, None)
                else:
                    doc[k] = v
            (folder / name).write_text(json.dumps(doc))
    micro = str(REPO / "calibration" / "microbench")
    sys.path.insert(0, micro)
    try:
        from cpu_profile_fit import profile
    finally:
        sys.path.remove(micro)
    out = folder / "p.yaml"
    profile(argparse.Namespace(out=str(folder), model=str(REPO / "workloads/models/tiny-llama.yaml"), name="cpu-t",
                               yaml=str(out), fresh=True, bounds=""))
    return out


def free_port() -> int:
    """A port on 127.0.0.1 nothing listens on now (the servers tests start bind there)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
