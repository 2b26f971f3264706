"""Write a run's outputs (simulated or real), the files ``pdsim run --out`` writes.

``summary.json``, ``requests.parquet|csv``, ``timeline.parquet|csv``, ``report.html``; a real
run adds its bench_serving-compatible JSON (benchjson.py). One function, so ``pdsim run`` and
``pdsim replay`` leave the same files behind.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..metrics.results import Results

BENCH_JSON = "bench.json"


def write_run_outputs(res: Results, out: str | Path, fmt: str = "parquet", report: bool = True,
                      bench_json: bool = False, standalone: bool = False) -> list[str]:
    """Write the run's files into ``out`` (created); returns the names written."""
    if fmt not in ("parquet", "csv"):
        raise ValueError(f"format must be parquet or csv, got {fmt!r}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = ["summary.json"]
    s = res.summary()
    with open(out / "summary.json", "w") as f:
        json.dump(s, f, indent=2, default=float)
    req, tl = res.requests, res.timeline
    if fmt == "parquet":
        # object columns of a real run (error text) stay strings; NaN-free for pyarrow
        req.to_parquet(out / "requests.parquet", index=False)
        tl.to_parquet(out / "timeline.parquet", index=False)
    else:
        req.to_csv(out / "requests.csv", index=False)
        tl.to_csv(out / "timeline.csv", index=False)
    written += [f"requests.{fmt}", f"timeline.{fmt}"]
    if report:
        from ..report.figures import report_html

        report_html(res, str(out / "report.html"), standalone=standalone)
        written.append("report.html")
        if not standalone:
            written.append("plotly.min.js")
    if bench_json:
        from .benchjson import write_bench_json

        write_bench_json(res, out / BENCH_JSON)
        written.append(BENCH_JSON)
    return written
