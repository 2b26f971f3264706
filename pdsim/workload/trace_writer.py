"""Write a RequestTable in any readable trace format (round trips, shareable samples).

Times are written at the resolution of the format: Mooncake ms with three decimals (1 us),
Azure 100 ns ticks from an arbitrary origin (2023-11-16 18:00:00), BurstGPT seconds with six
decimals, benchmark ``start_times`` as given. Reading the file back gives the same lengths and
hash ids (and Mooncake priorities) and the same arrival times to within 1 us. ``.gz`` paths are written compressed.
"""
from __future__ import annotations

import csv
import datetime as _dt
import gzip
import json
from pathlib import Path
from typing import IO

from ..specs.errors import SpecError
from .table import RequestTable

_AZURE_ORIGIN = _dt.datetime(2023, 11, 16, 18, 0, 0)


def _open_out(path: Path) -> IO[str]:
    if path.suffix.lower() == ".gz":
        return gzip.open(path, "wt", encoding="utf-8", newline="")
    return open(path, "w", encoding="utf-8", newline="")


def _ms(t_s: float) -> int | float:
    ms = round(t_s * 1000.0, 3)
    return int(ms) if float(ms).is_integer() else ms


def write_trace(table: RequestTable, path: str | Path, fmt: str = "mooncake") -> Path:
    """Write ``table`` as ``fmt`` (mooncake, azure, burstgpt or bench); returns the path."""
    p = Path(path)
    a, i, o = table.arrival_s.tolist(), table.input_len.tolist(), table.output_len.tolist()
    if fmt in ("mooncake", "jsonl"):
        with _open_out(p) as f:
            for k in range(len(a)):
                row: dict = {"timestamp": _ms(a[k]), "input_length": i[k], "output_length": o[k]}
                if table.hash_ids is not None:
                    row["hash_ids"] = table.hash_ids[k].tolist()
                if table.priority is not None:
                    row["priority"] = int(table.priority[k])
                f.write(json.dumps(row) + "\n")
    elif fmt == "azure":
        with _open_out(p) as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(["TIMESTAMP", "ContextTokens", "GeneratedTokens"])
            for k in range(len(a)):
                ticks = round(a[k] * 1e7)  # 100 ns, the resolution of the Azure traces
                stamp = _AZURE_ORIGIN + _dt.timedelta(seconds=ticks // 10_000_000)
                w.writerow([f"{stamp:%Y-%m-%d %H:%M:%S}.{ticks % 10_000_000:07d}", i[k], o[k]])
    elif fmt == "burstgpt":
        with _open_out(p) as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(["Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type"])
            for k in range(len(a)):
                w.writerow([repr(round(a[k], 6)), "pdsim", i[k], o[k], i[k] + o[k], "Conversation log"])
    elif fmt == "bench":
        doc = {"input_lens": i, "output_lens": o, "start_times": a, "errors": [""] * len(a),
               "max_concurrency": table.max_concurrency, "completed": len(a)}
        with _open_out(p) as f:
            json.dump(doc, f)
    else:
        raise SpecError(f"cannot write trace format {fmt!r}; expected mooncake, azure, burstgpt or bench",
                        field="format")
    return p


def write_mooncake(table: RequestTable, path: str | Path) -> Path:
    """Write a RequestTable as a Mooncake-format JSONL trace (timestamps in ms)."""
    return write_trace(table, path, "mooncake")
