"""Measure the file system a shared-storage KV connector writes to (vLLM ``ExampleConnector``):
per-file overhead and write/read bandwidth, the constants of pdsim/costs/shared_storage.py.

The connector saves one safetensors file per layer per request and D reads them back; so this
writes and reads files of the sizes one layer's KV takes (64 KiB .. 64 MiB), each opened,
written (or read) whole and closed, no fsync (the connector does not sync: page-cache speed for
a local disk), and fits  time = overhead + bytes / bandwidth  by least squares.

    python calibration/microbench/shared_storage.py --dir /tmp/kvstore --out calibration/data/shared_storage.csv
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import time
from pathlib import Path

import numpy as np

SIZES = [2**16, 2**18, 2**20, 2**22, 2**24, 2**26]


def measure(folder: Path, repeat: int) -> list[dict]:
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for size in SIZES:
        data = np.random.default_rng(0).integers(0, 255, size, dtype=np.uint8).tobytes()
        w, r = [], []
        for k in range(repeat):
            p = folder / f"layer{k}.bin"
            t0 = time.perf_counter()
            with open(p, "wb") as f:
                f.write(data)
            w.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            with open(p, "rb") as f:
                f.read()
            r.append(time.perf_counter() - t0)
            p.unlink()
        rows.append({"op": "write", "bytes": size, "us": float(np.median(w) * 1e6)})
        rows.append({"op": "read", "bytes": size, "us": float(np.median(r) * 1e6)})
    return rows


def fit(rows: list[dict], op: str) -> tuple[float, float]:
    x = np.array([r["bytes"] for r in rows if r["op"] == op], float)
    y = np.array([r["us"] for r in rows if r["op"] == op], float) * 1e-6
    # relative errors (rows weighted by 1 / time): small files set the overhead, large ones the
    # bandwidth, and one slow outlier (another process on the machine) cannot dominate
    a = np.vstack([np.ones_like(x), x]).T / y[:, None]
    (c0, c1), *_ = np.linalg.lstsq(a, np.ones_like(y), rcond=None)
    return max(c0, 0.0), 1.0 / c1  # seconds per file, bytes/s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="/tmp/pdsim-kvstore")
    ap.add_argument("--out", default="calibration/data/shared_storage.csv")
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    rows = measure(Path(args.dir), args.repeat)
    when, host = dt.date.today().isoformat(), platform.processor() or platform.machine()
    with open(args.out, "w") as f:
        f.write("op,bytes,us,source,software,date\n")
        for r in rows:
            f.write(f"{r['op']},{r['bytes']},{r['us']:.3f},measured: {args.dir} on this machine ({host}, "
                    f"{os.cpu_count()} cores),Python {platform.python_version()},{when}\n")
    for op in ("write", "read"):
        c0, bw = fit(rows, op)
        print(f"{op}: {c0 * 1e6:.1f} us per file + bytes / {bw / 1e9:.2f} GB/s")


if __name__ == "__main__":
    main()
