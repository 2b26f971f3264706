"""Fits of the system constants a GPU session measures (calibration/microbench/gpu_session.py):
copies (memcopy.csv) and host launch costs (launch.csv). Both are measured, not derived: a
profile gets them only from its own rows, never from another GPU's.

- ``memcopy``: per copy kind (d2d, h2d/d2h from pinned or pageable host memory) the line
  t = latency + traffic_bytes / bandwidth: bandwidth from the largest copies, latency from the
  smallest (``_line``).
  ``hbm_eff`` = device-to-device bandwidth (bytes read + written) / the datasheet HBM
  bandwidth: the achievable fraction the small memory-bound kernels are priced at; the pinned
  host-copy bandwidth is what offload tiers and host buffers move KV at (``host_copy_gbps``:
  the slower direction).
- ``host``: ``kernel_launch_us`` (host time to issue one kernel), ``launch_gpu_us`` (GPU time
  per back-to-back tiny kernel), and per batch the eager and CUDA-graph time of a decode step;
  ``eager_exposed_us`` = (eager - graph) / layers at the smallest batch (the GPU is fastest
  there, so the host's launches show the most): what that step paid per layer on top of a graph
  replay (the flat form's price, used only without a kernel count). Launches are asynchronous:
  the host issues ahead of the GPU and an eager step takes ~ max(GPU work, issue time), so at
  the smallest batch, host-bound, the eager step IS the issue time: ``eager_issue_us`` = eager /
  layers there, and ``eager_us_per_kernel`` = that / the kernels the measured layer launches
  (torch.profiler count), the per-kernel issue cost of costs/host.py's structural eager form
  (``kernel_launch_us`` x the kernels of the priced model's layer), which costs/step.py exposes
  only where it exceeds the step's GPU work.
"""
from __future__ import annotations

import numpy as np

COPY_KINDS = ("d2d", "h2d_pinned", "d2h_pinned", "h2d_pageable", "d2h_pageable")


def _line(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """(intercept, slope, mean |relative error|) of y = a + b x: the slope (1 / bandwidth) from the
    largest copies (median over sessions: there the fixed cost is < 1%), the intercept from the
    smallest (median of what the bandwidth leaves, >= 0). A joint least-squares line is not used:
    the small copies' run-to-run spread (up to 2x) drags it to a bandwidth above the HBM's."""
    big, small = x == x.max(), x == x.min()
    b = float(np.median(y[big] / x[big]))
    a = max(0.0, float(np.median(y[small] - b * x[small])))
    return a, b, float(np.mean(np.abs((a + b * x - y) / y)))


def fit_memcopy(rows, hw) -> dict | None:
    """Copy bandwidths (GB/s = 1e9 B/s) and fixed costs of one GPU's memcopy.csv rows."""
    rows = rows[rows["use"]] if "use" in rows else rows
    if rows.empty:
        return None
    out: dict = {}
    errs, n = [], 0
    for kind in COPY_KINDS:
        r = rows[rows["kind"] == kind]
        if len(r) < 2:
            continue
        a, b, err = _line(r["traffic_bytes"].to_numpy(float), r["us"].to_numpy(float))
        out[f"{kind}_gbps"] = 1.0 / b / 1e3  # bytes per us -> 1e9 B/s
        out[f"{kind}_latency_us"] = a
        errs.append(err * len(r))
        n += len(r)
    if "d2d_gbps" not in out:
        return None
    out["hbm_eff"] = out["d2d_gbps"] / hw.gpu.hbm_gbps
    pinned = [out[k] for k in ("h2d_pinned_gbps", "d2h_pinned_gbps") if k in out]
    if pinned:
        out["host_copy_gbps"] = min(pinned)
    out["fit_mape"] = sum(errs) / n
    out["points"] = float(n)
    out["label"] = "measured"
    out["data"] = "calibration/data/memcopy.csv"
    return out


def fit_host(rows) -> dict | None:
    """Launch costs (us) of one GPU's launch.csv rows."""
    rows = rows[rows["use"]] if "use" in rows else rows
    if rows.empty:
        return None
    out: dict = {}
    for kind, key in (("launch_host", "kernel_launch_us"), ("launch_gpu", "launch_gpu_us")):  # median over sessions
        r = rows[rows["kind"] == kind]
        if len(r):
            out[key] = float(r["us"].median())
    # repeated sessions: the median per batch (host-bound eager steps move tens of % between runs)
    eager = rows[rows["kind"] == "decode_step_eager"].groupby("batch")[["us", "layers"]].median()
    graph = rows[rows["kind"] == "decode_step_graph"].groupby("batch")[["us", "layers"]].median()
    both = sorted(set(eager.index) & set(graph.index))
    for b in both:
        layers = float(eager.loc[b, "layers"])
        out[f"eager_exposed_us_b{int(b)}"] = (float(eager.loc[b, "us"]) - float(graph.loc[b, "us"])) / layers
    if both:
        out["eager_exposed_us"] = max(0.0, out[f"eager_exposed_us_b{int(both[0])}"])
        out["batch"] = float(both[0])
        # launches are asynchronous: at the smallest batch the eager step is host-bound (the GPU
        # idles between kernels), so the step IS the issue time of its kernels, not the issue
        # time less the GPU work it overlapped
        issue = float(eager.loc[both[0], "us"]) / float(eager.loc[both[0], "layers"])
        out["eager_issue_us"] = issue
        steps = rows[(rows["kind"] == "decode_step_eager") & (rows["batch"] == both[0])]
        per_layer = (steps["kernels"].astype(float) / steps["layers"].astype(float)).dropna() if "kernels" in steps else []
        if len(per_layer):  # the profiler's kernel count: the host's issue time per kernel launched
            out["kernels_per_layer"] = float(per_layer.median())
            out["eager_us_per_kernel"] = issue / out["kernels_per_layer"]
    if "eager_exposed_us" not in out and "kernel_launch_us" not in out:
        return None
    out["points"] = float(len(rows))
    out["label"] = "measured"
    out["data"] = "calibration/data/launch.csv"
    return out
