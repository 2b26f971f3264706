"""Server request logs as runs: SGLang ``--log-requests`` and vLLM request logging.

SGLang (``python/sglang/srt/managers/tokenizer_manager.py``, ``Finish: obj=...``): one line per
finished request, ``[YYYY-mm-dd HH:MM:SS...] Finish: obj=GenerateReqInput(...), out={...
'meta_info': {'id': ..., 'prompt_tokens': N, 'completion_tokens': M, 'e2e_latency': s, ...}}``.
The request's arrival = the log time of its ``Finish`` line - ``e2e_latency`` (log times have
1 s resolution unless they carry fractions; noted); E2E is exact; TTFT/ITL are not logged.

vLLM (``--enable-log-requests``; ``vllm/entrypoints/logger.py``): ``Received request ID: ...
params: SamplingParams(... max_tokens=M ...), prompt_token_ids: [...]`` and later ``Finished
request ID``; log times ``MM-DD HH:MM:SS`` (1 s, no year). Input = the prompt ids counted,
output = ``max_tokens`` (asked; the log does not say how many came); E2E only to the second.

Both give a workload (lengths + arrivals) first; their latencies are coarse and the notes say so.
"""
from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

import numpy as np

from ..specs.errors import SpecError
from . import checks
from .common import Ingested, real_record, table_of

_SGL_TIME = re.compile(r"\[(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:[.,]\d+)?)")
_VLLM_TIME = re.compile(r"(\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)?)")


def _num(key: str, text: str, p: Path, where: str):
    """The number after ``'key':`` in a logged dict, as written (int or float); None when absent."""
    m = re.search(r"['\"]" + key + r"['\"]\s*:\s*([-0-9.eE]+)", text)
    if not m:
        return None
    try:
        return int(m.group(1))
    except ValueError:
        pass
    try:
        return float(m.group(1))
    except ValueError:
        raise SpecError(f"{where}meta_info.{key}: expected a number, got {m.group(1)[:40]!r}", source=str(p)) from None


def read_sglang_log(path: str | Path) -> Ingested:
    p = Path(path)
    rows = []
    with open(p, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            if "Finish: obj=" not in line or "meta_info" not in line:
                continue
            m = _SGL_TIME.search(line)
            if not m:
                raise SpecError(f"line {lineno}: no [YYYY-mm-dd HH:MM:SS] log time before Finish", source=str(p))
            where = f"line {lineno}: "
            try:
                t = datetime.fromisoformat(m.group(1).replace(",", ".")).timestamp()
            except ValueError as err:
                raise SpecError(f"{where}log time {m.group(1)!r}: {err}", source=str(p)) from None
            meta = line[line.index("meta_info"):]
            pt, ct, e2e = (_num(k, meta, p, where) for k in ("prompt_tokens", "completion_tokens", "e2e_latency"))
            if pt is None or ct is None:
                raise SpecError(f"line {lineno}: meta_info: prompt_tokens/completion_tokens missing", source=str(p))
            pt = checks.tokens(pt, p, where, "meta_info.prompt_tokens", zero_ok=True)
            ct = checks.tokens(ct, p, where, "meta_info.completion_tokens", zero_ok=True)
            e2e = None if e2e is None else checks.seconds(e2e, p, where, "meta_info.e2e_latency")
            rows.append((t, pt, ct, e2e, "." in m.group(1) or "," in m.group(1)))
    if not rows:
        raise SpecError("no 'Finish: obj=... meta_info' lines (start SGLang with --log-requests)", source=str(p))
    fin = np.array([r[0] for r in rows])
    e2e = np.array([r[3] if r[3] is not None else np.nan for r in rows])
    arrival = fin - np.nan_to_num(e2e)
    t0 = arrival.min()
    arrival, fin = arrival - t0, arrival - t0 + np.nan_to_num(e2e)
    fine = all(r[4] for r in rows)
    notes = ["arrival = Finish log time - e2e_latency" + ("" if fine else " (log times to the second: arrivals "
                                                                        "within +-1 s)"),
             "SGLang logs no token times: no TTFT/ITL, E2E from meta_info.e2e_latency"]
    meta = {"format": "sglang-log-requests", "source": str(p), "description": f"SGLang request log {p.name}",
            "notes": notes}
    order = np.argsort(arrival, kind="stable")
    rec = real_record(p.stem, arrival_s=arrival[order], input_len=[max(rows[i][1], 1) for i in order],
                      output_len=[max(rows[i][2], 1) for i in order], token_times=[[] for _ in rows],
                      drop_reason=[None if rows[i][2] >= 1 else "no_output" for i in order], meta=meta,
                      finish_s=fin[order])
    return Ingested("sglang-log-requests", rec, table_of(rec, source=str(p)), notes)


def _vllm_time(line: str) -> float | None:
    m = _VLLM_TIME.search(line)
    if not m:
        return None
    md, hms = m.group(1).split(" ")
    mo, d = (int(x) for x in md.split("-"))
    h, mi, s = hms.split(":")
    return ((mo * 31 + d) * 24 + int(h)) * 3600 + int(mi) * 60 + float(s)  # month length irrelevant within a log


def read_vllm_log(path: str | Path) -> Ingested:
    p = Path(path)
    got: dict[str, list] = {}
    order: list[str] = []
    with open(p, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            if "Received request " in line:
                rid = line.split("Received request ", 1)[1].split(":", 1)[0].strip()
                t = _vllm_time(line)
                mt = re.search(r"max_tokens=(\d+)", line)
                ids = re.search(r"prompt_token_ids: \[([^\]]*)\]", line)
                if t is None or mt is None or ids is None:
                    raise SpecError(f"line {lineno}: Received request: expected a log time, max_tokens=N and "
                                    "prompt_token_ids: [...]", source=str(p))
                n_in = ids.group(1).count(",") + 1 if ids.group(1).strip() else 0
                n_out = checks.tokens(int(mt.group(1)), p, f"line {lineno}: ", "max_tokens")
                got[rid] = [t, n_in, n_out, None, ids.group(1)]
                order.append(rid)
            elif "Finished request " in line:
                rid = line.split("Finished request ", 1)[1].strip().rstrip(".")
                if rid in got:
                    got[rid][3] = _vllm_time(line)
    if not got:
        raise SpecError("no 'Received request' lines (start vLLM with --enable-log-requests)", source=str(p))
    t = np.array([got[r][0] for r in order])
    t0 = t.min()
    fin = [got[r][3] - t0 if got[r][3] is not None else np.nan for r in order]
    notes = ["vLLM logs times to the second: arrivals and E2E are +-1 s", "output = max_tokens asked (the log does "
             "not count tokens returned); no TTFT/ITL"]
    meta = {"format": "vllm-request-log", "source": str(p), "description": f"vLLM request log {p.name}",
            "notes": notes}
    from ..workload.prefix_hashes import DEFAULT_BLOCK, hashes_of_logged_ids

    meta.update(hashes_of_logged_ids([got[r][4] for r in order], DEFAULT_BLOCK))  # the prompts' prefix structure
    rec = real_record(p.stem, arrival_s=t - t0, input_len=[max(got[r][1], 1) for r in order],
                      output_len=[max(got[r][2], 1) for r in order], token_times=[[] for _ in order],
                      drop_reason=[None if got[r][3] is not None else "unfinished_in_log" for r in order],
                      meta=meta, finish_s=fin)
    return Ingested("vllm-request-log", rec, table_of(rec, source=str(p)), notes)
