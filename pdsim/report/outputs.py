"""Write a run's outputs (simulated or real), the files ``pdsim run --out`` writes.

``summary.json``, ``requests.parquet|csv``, ``timeline.parquet|csv``, ``report.html``; a real
run adds its bench_serving-compatible JSON (benchjson.py). One function, so ``pdsim run`` and
``pdsim replay`` leave the same files behind.
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from ..metrics.results import Results
from ..metrics.tables import TIMELINE_COLUMNS, timeline_parts

BENCH_JSON = "bench.json"
ROWS = 1 << 16  # rows converted and written at a time: a part and its Parquet row group take ~25 MB


def _write_parts(parts, path: Path, fmt: str, empty=None) -> None:
    """Write frames with the same columns one after another into one Parquet file (row groups)
    or CSV file; ``empty`` (a frame with no rows) is written when ``parts`` yields nothing."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    writer = None
    first = True
    try:
        for df in parts:
            if fmt == "parquet":
                if writer is None:
                    schema = pa.Schema.from_pandas(df, preserve_index=False)
                    # a text column that is all None in the first part (drop reasons, errors) is
                    # still text in the next ones
                    schema = pa.schema([pa.field(f.name, pa.string()) if pa.types.is_null(f.type) else f
                                        for f in schema], metadata=schema.metadata)
                    writer = pq.ParquetWriter(path, schema)
                writer.write_table(pa.Table.from_pandas(df, preserve_index=False, schema=writer.schema))
            else:
                df.to_csv(path, index=False, mode="w" if first else "a", header=first)
            first = False
    finally:
        if writer is not None:
            writer.close()
    if first and empty is not None:
        empty.to_parquet(path, index=False) if fmt == "parquet" else empty.to_csv(path, index=False)


def write_run_outputs(res: Results, out: str | Path, fmt: str = "parquet", report: bool = True,
                      bench_json: bool = False, standalone: bool = False, verdicts=None) -> list[str]:
    """Write the run's files into ``out`` (created); returns the names written. ``verdicts``
    (metrics.detectors.diagnose) go into summary.json and the report."""
    if fmt not in ("parquet", "csv"):
        raise ValueError(f"format must be parquet or csv, got {fmt!r}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = ["summary.json"]
    s = res.summary()
    if verdicts is not None:
        from ..metrics.verdicts import verdicts_json

        s["verdicts"] = verdicts_json(verdicts)
    with open(out / "summary.json", "w") as f:
        json.dump(s, f, indent=2, default=float)
    req = res.requests
    _write_parts((req.iloc[i:i + ROWS] for i in range(0, max(len(req), 1), ROWS)), out / f"requests.{fmt}", fmt)
    _write_parts(timeline_parts(res.record, ROWS), out / f"timeline.{fmt}", fmt,
                 empty=pd.DataFrame({c: pd.Series(dtype=object if c in ("entity", "kind", "role") else float)
                                     for c in TIMELINE_COLUMNS}))
    written += [f"requests.{fmt}", f"timeline.{fmt}"]
    if report:
        from ..report.figures import report_html

        report_html(res, str(out / "report.html"), standalone=standalone, verdicts=verdicts)
        written.append("report.html")
        if not standalone:
            written.append("plotly.min.js")
    if bench_json:
        from .benchjson import write_bench_json

        write_bench_json(res, out / BENCH_JSON)
        written.append(BENCH_JSON)
    return written
