"""What the page's download buttons send (``dcc.Download`` data): a run's per-request table as
Parquet or CSV, its self-contained HTML report, and the launch commands of a scenario. Pure
functions of a finished run or a resolved scenario; nothing here reads a path a client sent."""
from __future__ import annotations

import base64
import io
import re
import tempfile
from pathlib import Path

FORMATS = ("parquet", "csv", "html")


def safe_name(name: object, default: str = "run") -> str:
    """A file-name stem from a scenario name: letters, digits, ``._-``, at most 80 characters."""
    s = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._-")[:80] if isinstance(name, str) else ""
    return s or default


def _bytes(data: bytes, filename: str, mime: str) -> dict:
    return {"content": base64.b64encode(data).decode("ascii"), "filename": filename, "base64": True, "type": mime}


def requests_parquet(res) -> bytes:
    """The run's per-request table (one row per request: arrival, phases, latencies in s)."""
    df = res.requests
    mixed = {c: "string" for c in df.columns if df[c].dtype == object}
    buf = io.BytesIO()
    df.astype(mixed).to_parquet(buf, index=False)
    return buf.getvalue()


def report_bytes(res) -> bytes:
    """The run's HTML report with plotly.js inlined (one file that opens offline, ~5 MB) and
    its verdicts (not re-simulated: the page stays responsive)."""
    from pdsim.metrics.detectors import diagnose
    from pdsim.report.figures import report_html

    with tempfile.TemporaryDirectory(prefix="pdsim-report-") as tmp:
        path = Path(tmp) / "report.html"
        report_html(res, path, standalone=True, verdicts=diagnose(res))
        return path.read_bytes()


def run_download(res, fmt: str) -> dict:
    """``dcc.Download`` data of run ``res`` in ``fmt`` (parquet, csv or html)."""
    stem = safe_name(res.name)
    if fmt == "parquet":
        return _bytes(requests_parquet(res), f"{stem}-requests.parquet", "application/vnd.apache.parquet")
    if fmt == "csv":
        return {"content": res.requests.to_csv(index=False), "filename": f"{stem}-requests.csv", "type": "text/csv"}
    if fmt == "html":
        return _bytes(report_bytes(res), f"{stem}-report.html", "text/html")
    raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")


ENGINES = ("sglang", "vllm")


def launch_text(resolved, engine: str) -> str:
    """The launch script of ``resolved`` for ``engine`` (pdsim.launch, as ``pdsim launch`` prints it)."""
    from pdsim.launch import launch_plan
    from pdsim.launch.script import render

    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    return render(launch_plan(resolved, engine, None))


def launch_download(text: str, name: str, engine: str) -> dict:
    return {"content": text, "filename": f"launch-{safe_name(name, 'scenario')}-{engine}.sh", "type": "text/x-sh"}
