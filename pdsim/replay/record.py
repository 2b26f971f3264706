"""A real run's results as a RunRecord (the same record a simulation fills).

``arrival_s`` is the send time, ``first_token_s``/``finish_s`` the first and last streamed
token, ``output_len`` the tokens asked for. Fields only a simulator sees (prefill start,
transfer, instance...) stay NaN/-1. Extra columns: ``output_tokens`` (tokens streamed),
``prompt_tokens`` (the server's count), ``http_status``, ``error``, ``stream_end_s``,
``finish_reason``, ``redirect`` (where the server redirected the request, followed or not).
"""
from __future__ import annotations

import numpy as np

from ..sim.record import ExplicitTokens, InstanceInfo, RunRecord, empty_requests
from ..workload.table import RequestTable
from .client import RequestResult


def results_record(table: RequestTable, results: list[RequestResult], *, name: str, meta: dict,
                   gpus: int = 1, nodes: float = 1.0, wall_s: float = 0.0) -> RunRecord:
    n = len(results)
    cols = empty_requests(n)
    cols["input_len"] = table.input_len.astype(np.int64).copy()
    cols["output_len"] = table.output_len.astype(np.int64).copy()
    cols["arrival_s"] = np.array([r.send_s for r in results], dtype=np.float64)
    cols["first_token_s"] = np.array([r.token_s[0] if r.token_s else np.nan for r in results])
    cols["finish_s"] = np.array([r.token_s[-1] if r.token_s and r.drop_reason is None else np.nan
                                 for r in results])
    cols["drop_reason"] = np.array([r.drop_reason for r in results], dtype=object)
    cols["prefill_instance"] = np.zeros(n, dtype=np.int64)
    cols["decode_instance"] = np.zeros(n, dtype=np.int64)
    cols["output_tokens"] = np.array([len(r.token_s) for r in results], dtype=np.int64)
    cols["prompt_tokens"] = np.array([r.prompt_tokens for r in results], dtype=np.int64)
    cols["http_status"] = np.array([r.http_status for r in results], dtype=np.int64)
    cols["error"] = np.array([r.error for r in results], dtype=object)
    cols["stream_end_s"] = np.array([r.stream_end_s for r in results], dtype=np.float64)
    cols["finish_reason"] = np.array([r.finish_reason for r in results], dtype=object)
    cols["redirect"] = np.array([r.redirect for r in results], dtype=object)
    tokens = ExplicitTokens.from_lists([r.token_s for r in results])
    ends = [t for r in results for t in (r.token_s[-1:] if r.token_s else [])]
    end = max(ends) if ends else 0.0
    busy = sum(len(r.token_s) for r in results)
    inst = [InstanceInfo("server", "server", gpus, tokens_out=busy)]
    slo = {"ttft_ms": None, "itl_ms": None, "tpot_ms": None, "e2e_ms": None}
    return RunRecord(name, "real", cols, tokens, inst, gpus, nodes, slo, end, wall_s=wall_s or end,
                     meta=dict(meta), steps=[{}])
