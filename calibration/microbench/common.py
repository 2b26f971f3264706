"""Shared helpers for the microbenchmarks: timing, provenance, rows in the data schema.

Run on any GPU (CUDA events) or, with --dry-run, on CPU with tiny shapes (wall clock) so the
harness itself is testable without a GPU. Rows are written in the column order of
``pdsim.calibrate.data.SCHEMAS`` (appended to an existing file in that file's own column
order), each with provenance: source ``measured`` (``dry-run (not a measurement)`` on CPU),
hardware (the pdsim profile key: --hardware, else guessed from the device name), software
(torch, CUDA, device name) and date.
"""
from __future__ import annotations

import argparse
import csv
import datetime as dt
import importlib.util
import os
import time
from pathlib import Path

from pdsim.calibrate.schemas import columns  # stdlib only: the GPU machine has torch, not pandas/scipy

PROFILE_KEYS = {"H100": "h100", "H200": "h200", "H800": "h800", "H20": "h20", "A800": "a800"}


def parser(desc: str, model: str = "workloads/models/llama-3.1-8b.yaml") -> argparse.ArgumentParser:
    # every microbenchmark starts here: a missing torch is one line naming the extra, not a traceback
    if importlib.util.find_spec("torch") is None:
        raise SystemExit("the microbenchmarks need PyTorch, which is not installed: pip install 'pdsim[calibration]' "
                         "(on this project's machines: pip install torch==2.13.0)")
    ap = argparse.ArgumentParser(description=desc)
    ap.add_argument("--model", default=model, help="pdsim model YAML")
    ap.add_argument("--out", default="calibration/data", help="folder for the CSV (appended)")
    ap.add_argument("--hardware", help="pdsim hardware profile key of this GPU (default: from the device name)")
    ap.add_argument("--dry-run", action="store_true", help="tiny shapes on CPU: checks the harness, not the GPU")
    ap.add_argument("--repeat", type=int, default=20)
    return ap


def device(args):
    import torch

    if args.dry_run or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda")


def provenance(args) -> dict:
    import torch

    dev = device(args)
    name = torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu (dry run)"
    guess = next((v for k, v in PROFILE_KEYS.items() if k in name.replace("-", " ").split() or f" {k} " in f" {name} "),
                 name)
    return {"source": "measured" if dev.type == "cuda" else "dry-run (not a measurement)",
            "hardware": args.hardware or guess,
            "software": f"torch {torch.__version__}, CUDA {torch.version.cuda or 'none'}, {name}",
            "date": dt.date.today().isoformat()}


def time_us(fn, args, warmup: int = 3) -> float:
    """Median microseconds of ``fn()`` over ``args.repeat`` runs (CUDA events on a GPU)."""
    import torch

    dev = device(args)
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(max(1, args.repeat)):
        if dev.type == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            torch.cuda.synchronize()
            samples.append(a.elapsed_time(b) * 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - t0) * 1e6)
    samples.sort()
    return samples[len(samples) // 2]


def write_csv(path: Path, rows: list[dict]) -> None:
    """``rows`` to a new CSV at ``path``, in the first row's column order (a file of its own: not
    one of calibration/data's schemas, which ``write_rows`` appends to)."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def write_rows(args, name: str, rows: list[dict], prov: dict | None = None) -> Path:
    """Append ``rows`` (+ provenance, ``provenance(args)`` unless given) to ``<out>/<name>.csv``
    in that file's column order."""
    path = Path(args.out) / f"{name}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists() or os.path.getsize(path) == 0
    if new:
        fields = columns(name)
    else:
        with open(path, newline="") as f:
            fields = next(csv.reader(f))
    prov = prov or provenance(args)
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        if new:
            w.writeheader()
        for r in rows:
            w.writerow({**r, **prov})
    return path
