"""Turn a WorkloadSpec into a RequestTable (deterministic by seed)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..specs.errors import SpecError
from ..specs.workload import LengthDist, WorkloadSpec
from .table import RequestTable


def sample_lengths(d: LengthDist, n: int, rng: np.random.Generator) -> np.ndarray:
    if d.dist == "fixed":
        x = np.full(n, d.value, dtype=np.int64)
    elif d.dist == "uniform":
        x = rng.integers(d.min, d.max + 1, size=n)
    elif d.dist == "random_ratio":
        lo = max(1, int(d.value * d.range_ratio))
        x = rng.integers(lo, d.value + 1, size=n)
    elif d.dist == "normal":
        x = np.rint(rng.normal(d.mean, d.std, size=n))
    else:  # lognormal parameterised by the mean and std of the lengths
        sigma2 = np.log1p((d.std / d.mean) ** 2)
        x = np.rint(rng.lognormal(np.log(d.mean) - sigma2 / 2, np.sqrt(sigma2), size=n))
    return np.clip(x, d.min, d.max).astype(np.int64) if d.dist in ("normal", "lognormal") else x.astype(np.int64)


def arrivals(spec: WorkloadSpec, n: int, rng: np.random.Generator) -> np.ndarray:
    if spec.rate is None:
        return np.zeros(n)
    if spec.arrival == "constant":
        gaps = np.full(n, 1.0 / spec.rate)
    else:  # gamma with shape k and mean 1/rate; k = 1 is Poisson (bench_serving --burstiness)
        gaps = rng.gamma(spec.burstiness, 1.0 / (spec.rate * spec.burstiness), size=n)
    gaps[0] = 0.0
    return np.cumsum(gaps)


def materialize(spec: WorkloadSpec, seed: int = 0, base_dir: Path | None = None) -> RequestTable:
    rng = np.random.default_rng(seed)
    if spec.kind == "fixed_batch":
        n = spec.batch_size
        return RequestTable(np.zeros(n), sample_lengths(spec.input, n, rng), sample_lengths(spec.output, n, rng),
                            source="fixed_batch")
    if spec.kind == "synthetic":
        n = spec.num_requests
        inp = sample_lengths(spec.input, n, rng)
        out = sample_lengths(spec.output, n, rng)
        return RequestTable(arrivals(spec, n, rng), inp, out, max_concurrency=spec.max_concurrency,
                            source="synthetic")
    return _read_mooncake(spec, base_dir)


def _read_mooncake(spec: WorkloadSpec, base_dir: Path | None) -> RequestTable:
    t = spec.trace
    p = Path(t.path)
    if not p.is_absolute() and base_dir is not None and (base_dir / p).exists():
        p = base_dir / p
    if not p.exists():
        raise SpecError(f"trace file not found: {t.path}", field="workload.trace.path")
    ts, inp, out, hashes = [], [], [], []
    with open(p) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                ts.append(float(row["timestamp"]) / 1000.0)
                inp.append(int(row["input_length"]))
                out.append(int(row["output_length"]))
                hashes.append(np.asarray(row.get("hash_ids", []), dtype=np.int64))
            except (ValueError, KeyError, TypeError) as err:
                raise SpecError(f"line {lineno}: bad row ({err})", source=str(p)) from None
            if t.limit and len(ts) >= t.limit:
                break
    a = np.asarray(ts)
    a = (a - a[0]) * t.time_scale
    return RequestTable(a, inp, out, hash_ids=hashes, source=str(p))
