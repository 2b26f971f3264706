"""Shared helpers for the microbenchmarks: timing, provenance, CSV rows in the data schema.

Run on any GPU (CUDA events) or, with --dry-run, on CPU with tiny shapes (wall clock) so the
harness itself is testable without a GPU. Every row gets: source=measured, hardware (the
pdsim profile key given by --hardware, or the device name), software (torch + CUDA), date.
"""
from __future__ import annotations

import argparse
import csv
import datetime as dt
import os
import time
from pathlib import Path


def parser(desc: str, model: str = "workloads/models/llama-3.1-8b.yaml") -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=desc)
    ap.add_argument("--model", default=model, help="pdsim model YAML")
    ap.add_argument("--out", default="calibration/data", help="folder for the CSV (appended)")
    ap.add_argument("--hardware", help="pdsim hardware profile key of this GPU (e.g. h100)")
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
    cuda = torch.version.cuda or "none"
    return {"source": "measured" if dev.type == "cuda" else "dry-run (not a measurement)",
            "hardware": args.hardware or name, "software": f"torch {torch.__version__}, CUDA {cuda}, {name}",
            "date": dt.date.today().isoformat()}


def time_us(fn, args, warmup: int = 3) -> float:
    """Median microseconds of ``fn()`` over ``args.repeat`` runs."""
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


def write_rows(args, name: str, rows: list[dict]) -> Path:
    path = Path(args.out) / f"{name}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists() or os.path.getsize(path) == 0
    prov = provenance(args)
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]) + list(prov))
        if new:
            w.writeheader()
        for r in rows:
            w.writerow({**r, **prov})
    return path
