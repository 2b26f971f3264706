"""A whole replay: ask the server who it is, prepare exact-length prompts, send, record.

``replay(table, cfg, ...)`` returns a RunRecord of kind ``real`` whose ``meta`` carries the
provenance: endpoint, API, served model, how prompts were made (token ids or calibrated text),
server and client versions, date, workload source, load settings.
"""
from __future__ import annotations

import asyncio
import datetime as dt
import functools
import platform
import time

import numpy as np

from ..sim.record import RunRecord
from ..specs.errors import SpecError
from ..workload.table import RequestTable
from .client import ReplayConfig, Replayer
from .prompts import TextCalibrator, TokenPrompts, seeded_text
from . import guards
from .priority import fifo, probe_fifo
from .record import results_record


def redirect_summary(results: list, followed: bool) -> dict:
    """What the run's outputs say about redirects: followed or refused, how many requests were
    redirected, and to where (first few distinct targets)."""
    where = [r.redirect for r in results if r.redirect]
    targets = list(dict.fromkeys(where))
    return {"followed": followed, "requests": len(where), "targets": targets[:5]}


async def _get_json(session, url: str, method: str = "GET", body: dict | None = None, *,
                    limit: int = guards.INFO, follow_redirects: bool = False, field: str = "--endpoint"):
    """The JSON object a server endpoint answers, or None when it does not serve it (no answer,
    an error status, a redirect not followed, a body that is not JSON at all, e.g. a web page). A
    200 answer that is too long (``limit`` bytes), nested too deeply, or JSON but not an object
    is a SpecError naming the endpoint: the server is not what it claims, and guessing would make
    the run's provenance wrong."""
    import aiohttp

    try:
        async with session.request(method, url, json=body, timeout=aiohttp.ClientTimeout(total=30),
                                   allow_redirects=follow_redirects) as r:
            if r.status != 200:
                return None
            d = guards.loads(await guards.read_bounded(r, limit), "answer")
    except (aiohttp.ClientError, asyncio.TimeoutError, guards.NotJSON):
        return None
    except guards.Malformed as err:
        raise SpecError(f"{url}: {err}", field=field) from None
    if not isinstance(d, dict):
        raise SpecError(f"{url}: expected a JSON object, got {guards.short(d)}", field=field)
    return d


def _str_field(d: dict, key: str, url: str) -> str | None:
    v = d.get(key)
    if v is not None and not isinstance(v, (str, int, float)):
        raise SpecError(f"{url}: {key}: expected a string, got {guards.short(v)}", field="--endpoint")
    return None if v is None else str(v)[:200]


async def server_info(session, base: str, follow_redirects: bool = False) -> dict:
    """What the server says about itself: models, version (vLLM ``/version``, SGLang
    ``/get_server_info``). Raises SpecError when nothing answers at ``base``, or when an answer
    is not the shape these endpoints have."""
    get = functools.partial(_get_json, session, follow_redirects=follow_redirects)
    models = await get(base + "/v1/models")
    version = await get(base + "/version")
    sgl = await get(base + "/get_server_info")
    if models is None and version is None and sgl is None:
        raise SpecError(f"no OpenAI-compatible or SGLang server answers at {base} (tried /v1/models, /version, "
                        "/get_server_info)", field="--endpoint")
    info: dict = {}
    data = models.get("data") if models else None
    if data is not None:
        url = base + "/v1/models"
        if not isinstance(data, list) or not all(isinstance(m, dict) for m in data):
            raise SpecError(f"{url}: data: expected a list of model objects, got {guards.short(data)}",
                            field="--endpoint")
        if data:
            info["models"] = [_str_field(m, "id", url) for m in data[:1000]]
            mml = data[0].get("max_model_len")
            info["max_model_len"] = mml if type(mml) is int else None
    if version:
        info["server_version"] = f"vLLM {_str_field(version, 'version', base + '/version')}"
    if sgl:
        info["server_version"] = f"SGLang {_str_field(sgl, 'version', base + '/get_server_info') or '?'}"
        info.setdefault("models", [_str_field(sgl, "model_path", base + "/get_server_info")])
    return info


ENGINE_COUNTERS = ("vllm:iteration_tokens_total_count", "vllm:iteration_tokens_total_sum",
                   "vllm:generation_tokens_total", "vllm:prompt_tokens_total", "vllm:num_preemptions_total",
                   "vllm:request_prefill_time_seconds_sum", "vllm:request_decode_time_seconds_sum",
                   "vllm:request_queue_time_seconds_sum",
                   # prompt tokens looked up in / found in the prefix cache (pdsim validate's cache note
                   # derives the computed ones from the step counters, which every vLLM V1 serves)
                   "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total")


async def engine_counters(session, base: str) -> dict[str, float]:
    """vLLM's Prometheus counters (engine steps, tokens, preemptions); {} when not served.
    Their deltas over a run say how many engine steps the real server took."""
    import aiohttp

    try:
        async with session.get(base + "/metrics", timeout=aiohttp.ClientTimeout(total=10),
                               allow_redirects=False) as r:
            if r.status != 200:
                return {}
            text = (await guards.read_bounded(r, guards.METRICS, "/metrics")).decode("utf-8", errors="replace")
    except (aiohttp.ClientError, asyncio.TimeoutError, guards.Malformed):
        return {}  # the counters are provenance, not results: a run goes on without them
    out: dict[str, float] = {}
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in ENGINE_COUNTERS:
            try:
                out[name] = out.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
            except ValueError:
                continue
    return out


async def _tokenize(session, base: str, model: str, api: str, text: str,
                    follow_redirects: bool = False) -> list[int] | None:
    """The server tokenizer's ids of ``text``; None when the server has no ``/tokenize``."""
    body = {"model": model, "add_special_tokens": False}
    if api == "chat":
        body.update(messages=[{"role": "user", "content": text}], add_generation_prompt=True)
        body.pop("add_special_tokens")
    else:
        body["prompt"] = text
    url = base + "/tokenize"
    d = await _get_json(session, url, "POST", body, limit=guards.TOKENIZE, follow_redirects=follow_redirects,
                        field="--prompt")
    if d is None:
        return None
    toks = d.get("tokens")
    if not isinstance(toks, list) or not all(type(t) is int and 0 <= t < 2**31 for t in toks):
        raise SpecError(f"{url}: tokens: expected a list of token ids (integers >= 0), got {guards.short(toks)}",
                        field="--prompt")
    return toks


async def _prepare(session, table: RequestTable, cfg: ReplayConfig, model: str) -> tuple[object, dict]:
    """(prompt maker i -> prompt, provenance of the prompts)."""
    base = cfg.endpoint.rstrip("/")
    mode = cfg.prompt
    if mode == "auto":
        mode = "text" if cfg.api == "chat" else "token_ids"
    if mode == "token_ids":
        pool = await _tokenize(session, base, model, "completions", seeded_text(4000, cfg.seed + 1),
                               cfg.follow_redirects)
        how = "token ids drawn from the server tokenizer's ids of a seeded text (/tokenize)"
        if pool is None:
            if not cfg.vocab_size:
                raise SpecError("the server has no /tokenize endpoint to find ordinary token ids; give --vocab-size "
                                "(ids are drawn from [16, vocab_size)) or --prompt text", field="--prompt")
            pool = np.arange(min(16, cfg.vocab_size - 2), cfg.vocab_size)
            how = f"token ids drawn uniformly from [16, {cfg.vocab_size})"
        try:
            tp = TokenPrompts(np.asarray(pool, dtype=np.int64), cfg.seed)
        except ValueError as err:  # e.g. /tokenize answered no ids
            raise SpecError(f"{base}/tokenize: {err} (it gave {len(pool)} ids for a 4,000-word text); give "
                            "--vocab-size or --prompt text", field="--prompt") from None
        hids, block = table.hash_ids, table.block_size
        ins = table.input_len.tolist()

        def make(i: int):
            return tp.prompt(i, ins[i], hids[i] if hids is not None else None, block)
        return make, {"prompt_mode": "token_ids", "prompt_method": how + "; exact input lengths",
                      "prefix_structure": hids is not None}

    async def count(text: str) -> int:
        toks = await _tokenize(session, base, model, cfg.api, text, cfg.follow_redirects)
        if toks is None:
            raise SpecError("calibrating text prompts needs the server's /tokenize endpoint, which did not answer; "
                            "use --api completions or generate with token ids", field="--prompt")
        return len(toks)
    cal = TextCalibrator(count, seed=cfg.seed + 2)
    texts = {}
    for length in sorted(set(table.input_len.tolist())):
        texts[length] = await cal.text(int(length))
    off = sum(1 for L in table.input_len.tolist() if texts[L][1] != L)
    ins = table.input_len.tolist()
    how = ("text calibrated to the server's tokenizer (/tokenize" + (" with the chat template" if cfg.api == "chat"
                                                                       else "") + ")")
    return (lambda i: texts[ins[i]][0]), {"prompt_mode": "text", "prompt_method": how,
                                           "prompt_length_mismatches": off, "prefix_structure": False}


def fit_max_model_len(table: RequestTable, max_model_len: int | None, skip: bool) -> tuple[RequestTable, int]:
    """``table`` less the requests whose prompt + output exceed the server's ``max_model_len``
    (vLLM answers those with HTTP 400 before running them), and how many were left out. Without
    ``skip`` such requests are refused up front, saying how many, the first, and what to do: a
    public trace's longest rows would otherwise fail one by one and the recording would silently
    be a different workload."""
    if not max_model_len or not len(table):
        return table, 0
    total = table.input_len + table.output_len
    over = np.flatnonzero(total > max_model_len)
    if not over.size:
        return table, 0
    if not skip:
        i = int(over[0])
        raise SpecError(f"{over.size} of {len(table)} requests need more than the server's max_model_len "
                        f"{max_model_len} (prompt + output; the first is request {i}: {int(table.input_len[i])} + "
                        f"{int(table.output_len[i])}), which the server refuses; give --skip-too-long to leave "
                        "them out (the run records how many), or start the server with a larger --max-model-len",
                        field="--endpoint")
    keep = np.flatnonzero(total <= max_model_len)
    if not keep.size:  # an empty recording would pass for a run
        raise SpecError(f"all {len(table)} requests need more than the server's max_model_len {max_model_len} "
                        f"(prompt + output; the shortest needs {int(total.min())}): nothing is left to send; start "
                        "the server with a larger --max-model-len", field="--endpoint")
    out = RequestTable(table.arrival_s[keep], table.input_len[keep], table.output_len[keep],
                       [table.hash_ids[k] for k in keep] if table.hash_ids is not None else None, table.block_size,
                       table.max_concurrency, table.source, table.skipped_rows, dict(table.meta),
                       table.priority[keep] if table.priority is not None else None)
    return out, int(over.size)


async def _replay(table: RequestTable, cfg: ReplayConfig, hash_block: int) -> tuple[list, dict, float, RequestTable]:
    import aiohttp

    base = cfg.endpoint.rstrip("/")
    conn = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(connector=conn, read_bufsize=1 << 20) as session:
        info = await server_info(session, base, cfg.follow_redirects)
        model = cfg.model or (info.get("models") or [None])[0]
        if cfg.api != "generate" and not model:
            raise SpecError("the server lists no model; give --model", field="--model")
        if cfg.model and info.get("models") and cfg.model not in info["models"]:
            raise SpecError(f"model {cfg.model!r} is not served here (the server has {', '.join(map(str, info['models']))})",
                            field="--model")
        cfg.model = model
        table, too_long = fit_max_model_len(table, info.get("max_model_len"), cfg.skip_too_long)
        if too_long:
            info["skipped_too_long"] = too_long
        make, prov = await _prepare(session, table, cfg, model)
        r = Replayer(cfg)
        before = await engine_counters(session, base)
        w0 = time.perf_counter()
        try:
            with fifo(cfg.fifo):  # the send/receive loop only, not the prompts' preparation (priority.py)
                results = await r.run(table, make, session)
        finally:
            wall = time.perf_counter() - w0
        after = await engine_counters(session, base)
    if before and after:
        info["engine_counters"] = {k.removeprefix("vllm:"): after[k] - before.get(k, 0.0) for k in after}
    info.update(prov)
    if prov.get("prompt_mode") == "token_ids":  # after the timed run: each prompt as vLLM-style block hashes
        from ..workload.prefix_hashes import block_hashes

        info["prompt_hash_block_size"] = hash_block
        info["prompt_hash_ids"] = [block_hashes(make(i), hash_block, i) for i in range(len(table))]
    info["waited_for_inflight_bound"] = r.waited
    info["redirects"] = redirect_summary(results, cfg.follow_redirects)
    info["interrupted"] = r.stopped
    return results, info, wall, table


def replay(table: RequestTable, cfg: ReplayConfig, *, name: str = "replay", description: str = "",
           hardware: str = "", model_label: str = "", gpus: int = 1, nodes: float = 1.0,
           workload_source: str = "", hash_block: int | None = None) -> RunRecord:
    """Replay ``table`` against ``cfg.endpoint``; the real run's RunRecord. ``hash_block``: the
    engine's KV block (page) size, the unit of the prompts' recorded prefix hashes
    (prefix_hashes.py; default 16, vLLM's)."""
    import aiohttp

    from ..specs.machine import sched_autogroup
    from ..workload.prefix_hashes import DEFAULT_BLOCK

    date = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    probe_fifo(cfg.fifo)  # no right to the priority: said before anything is sent
    results, info, wall, table = asyncio.run(_replay(table, cfg, hash_block or DEFAULT_BLOCK))
    from .. import __version__ as pdsim_version

    meta = {
        "kind": "real", "description": description or f"real run against {cfg.endpoint}",
        "hardware": hardware or "unknown", "model": model_label or cfg.model, "endpoint": cfg.endpoint,
        "api": cfg.api, "served_model": cfg.model, "date": date,
        "client": f"pdsim {pdsim_version} replay (aiohttp {aiohttp.__version__}, Python {platform.python_version()})",
        "workload_source": workload_source or table.source, "max_concurrency": cfg.max_concurrency
        or table.max_concurrency, "ignore_eos": cfg.ignore_eos, "timeout_s": cfg.timeout_s, "seed": cfg.seed,
        "request_rate": table.meta.get("request_rate"), "table_meta": dict(table.meta),
        "client_sched": f"SCHED_FIFO {cfg.fifo}" if cfg.fifo is not None else "as started",
        # what a spinning engine core costs another server depends on it (host.autogroup)
        "sched_autogroup": sched_autogroup(),
    }
    meta.update(info)
    return results_record(table, results, name=name, meta=meta, gpus=gpus, nodes=nodes, wall_s=wall)
