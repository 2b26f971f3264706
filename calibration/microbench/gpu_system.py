"""System family of the GPU session (gpu_session.py): copies and host-side launch costs.

memcopy.csv: device-to-device (HBM: each byte read once and written once, traffic 2x the copy),
host-to-device and device-to-host from pinned and from pageable host memory (traffic 1x: bytes
crossing PCIe), 4 MB .. 1 GB.

launch.csv: per-kernel launch cost (2000 one-element kernels back to back: GPU time per kernel
from CUDA events, and the host's issue time per kernel), and eager vs CUDA-graph replay time
of one decoder layer and of a whole 32-layer Llama-3.1-8B decode step (gpu_forward.TorchLlama,
static KV of 1024 tokens) at batch 1 and 64, with the kernels per layer counted by the profiler.
"""
from __future__ import annotations

import time

from gpu_forward import TorchLlama, shape

SIZES_MB = (4, 16, 64, 256, 1024)
LAUNCHES = 2000


def memcopy(s, rows: list) -> None:
    torch, dev = s.torch, s.dev
    sizes = (1, 4) if s.dry else SIZES_MB
    for mb in sizes:
        n = mb * 2**20
        if not s.ok():
            continue
        a = torch.empty(n, dtype=torch.uint8, device=dev)
        b = torch.empty(n, dtype=torch.uint8, device=dev)
        calls = max(1, min(50, int(300e-6 * 3e12 / (2 * n)))) if not s.dry else 1
        us = s.time_us(lambda _i: b.copy_(a), calls=calls)
        rows.append({"kind": "d2d", "bytes": n, "traffic_bytes": 2 * n, "us": us, "gbps": 2 * n / us / 1e3,
                     "note": "device-to-device tensor copy_ (HBM read + write)"})
        del b
        for pinned in (True, False):
            if s.dry and pinned:
                continue  # pinning needs a CUDA context
            host = torch.ones(n, dtype=torch.uint8, pin_memory=pinned)  # ones: pages are faulted in
            mem = "pinned" if pinned else "pageable"
            for kind, fn in ((f"h2d_{mem}", lambda _i: a.copy_(host, non_blocking=pinned)),
                             (f"d2h_{mem}", lambda _i: host.copy_(a, non_blocking=pinned))):
                if not s.ok():
                    continue
                us = s.time_us(fn)
                rows.append({"kind": kind, "bytes": n, "traffic_bytes": n, "us": us, "gbps": n / us / 1e3,
                             "note": f"{'host-to-device' if kind.startswith('h2d') else 'device-to-host'} copy_ from "
                                     f"{mem} host memory{', non_blocking' if pinned else ''}"})
            del host
        del a
        s.free()


def launch(s, rows: list) -> None:
    torch, dev = s.torch, s.dev
    x = torch.zeros(1, device=dev)
    n = 50 if s.dry else LAUNCHES
    gpu = s.time_us(lambda _i: x.add_(1), calls=n)
    s.sync()
    host = []
    for _ in range(3):
        t0 = time.perf_counter()
        for _i in range(n):
            x.add_(1)
        host.append((time.perf_counter() - t0) * 1e6 / n)
        s.sync()
    rows.append({"kind": "launch_gpu", "kernels": 1, "batch": 1, "us": gpu,
                 "note": f"{n} one-element add_ kernels back to back: CUDA-event time per kernel"})
    rows.append({"kind": "launch_host", "kernels": 1, "batch": 1, "us": sorted(host)[1],
                 "note": f"{n} one-element add_ kernels: host time to issue one (perf_counter, median of 3)"})


def _kernels_per_layer(s, model, x, pos, ctx) -> int | None:
    """GPU kernels one eager decoder layer launches (torch.profiler), or None if it cannot say."""
    torch = s.torch
    try:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            model.layer(x, 0, pos, ctx)
            s.sync()
        return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA) or None
    except Exception:  # the count is a label for the rows, not a measurement they need
        return None


def _graph(s, fn):
    """Capture ``fn`` in a CUDA graph (warmed up on a side stream, as torch.cuda.graph requires)."""
    torch = s.torch
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g


def graphs(s, rows: list) -> None:
    torch, dev = s.torch, s.dev
    c = shape(s)
    ctx = 64 if s.dry else 1024
    for b in ((1, 2) if s.dry else (1, 64)):
        if not s.ok():
            continue
        model = TorchLlama(torch, dev, c, b, ctx + 1)
        x = torch.randn(b, 1, c["hidden"], device=dev, dtype=torch.bfloat16)
        pos = torch.tensor([ctx], device=dev)
        common = {"model": "llama-3.1-8b", "batch": b, "context": ctx}
        base = f"repo TorchLlama (gpu_forward.py), random BF16 weights, static KV of {ctx} tokens"
        with torch.no_grad():
            for unit, layers, fn in (("layer", 1, lambda: model.layer(x, 0, pos, ctx + 1)),
                                     ("decode_step", c["layers"], lambda: model.step(x, pos, ctx + 1))):
                eager = s.time_us(lambda _i: fn(), warmup=3)  # a first eager call at a new shape can be 10x slower
                rows.append({**common, "kind": f"{unit}_eager", "layers": layers, "us": eager,
                             "note": f"{base}, eager"})
                if s.dry:
                    continue  # no CUDA graphs on CPU: the eager rows check the harness
                g = _graph(s, fn)
                rows.append({**common, "kind": f"{unit}_graph", "layers": layers,
                             "us": s.time_us(lambda _i: g.replay()), "note": f"{base}, CUDA graph replay"})
                del g
            # counted after the timings, so the profiler's hooks never sit in a timed window
            kern = _kernels_per_layer(s, model, x, pos, ctx + 1)
            for r in rows:
                if r.get("batch") == b and "layers" in r and kern:
                    r["kernels"] = kern * r["layers"]
        del model, x
        s.free()


def system(s, out: dict) -> None:
    memcopy(s, out.setdefault("memcopy", []))
    launch(s, out.setdefault("launch", []))
    graphs(s, out.setdefault("launch", []))
