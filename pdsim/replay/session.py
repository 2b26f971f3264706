"""A whole replay: ask the server who it is, prepare exact-length prompts, send, record.

``replay(table, cfg, ...)`` returns a RunRecord of kind ``real`` whose ``meta`` carries the
provenance: endpoint, API, served model, how prompts were made (token ids or calibrated text),
server and client versions, date, workload source, load settings.
"""
from __future__ import annotations

import asyncio
import datetime as dt
import platform
import time

import numpy as np

from ..sim.record import RunRecord
from ..specs.errors import SpecError
from ..workload.table import RequestTable
from .client import ReplayConfig, Replayer
from .prompts import TextCalibrator, TokenPrompts, seeded_text
from .record import results_record


async def _get_json(session, url: str, method: str = "GET", body: dict | None = None):
    import aiohttp

    try:
        async with session.request(method, url, json=body, timeout=aiohttp.ClientTimeout(total=30)) as r:
            if r.status != 200:
                return None
            return await r.json(content_type=None)
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError):
        return None


async def server_info(session, base: str) -> dict:
    """What the server says about itself: models, version (vLLM ``/version``, SGLang
    ``/get_server_info``). Raises SpecError when nothing answers at ``base``."""
    models = await _get_json(session, base + "/v1/models")
    version = await _get_json(session, base + "/version")
    sgl = await _get_json(session, base + "/get_server_info")
    if models is None and version is None and sgl is None:
        raise SpecError(f"no OpenAI-compatible or SGLang server answers at {base} (tried /v1/models, /version, "
                        "/get_server_info)", field="--endpoint")
    info: dict = {}
    if models and isinstance(models.get("data"), list) and models["data"]:
        info["models"] = [m.get("id") for m in models["data"]]
        info["max_model_len"] = models["data"][0].get("max_model_len")
    if version:
        info["server_version"] = f"vLLM {version.get('version')}"
    if sgl:
        info["server_version"] = f"SGLang {sgl.get('version', '?')}"
        info.setdefault("models", [sgl.get("model_path")])
    return info


ENGINE_COUNTERS = ("vllm:iteration_tokens_total_count", "vllm:iteration_tokens_total_sum",
                   "vllm:generation_tokens_total", "vllm:prompt_tokens_total", "vllm:num_preemptions_total",
                   "vllm:request_prefill_time_seconds_sum", "vllm:request_decode_time_seconds_sum",
                   "vllm:request_queue_time_seconds_sum")


async def engine_counters(session, base: str) -> dict[str, float]:
    """vLLM's Prometheus counters (engine steps, tokens, preemptions); {} when not served.
    Their deltas over a run say how many engine steps the real server took."""
    import aiohttp

    try:
        async with session.get(base + "/metrics", timeout=aiohttp.ClientTimeout(total=10)) as r:
            if r.status != 200:
                return {}
            text = await r.text()
    except (aiohttp.ClientError, asyncio.TimeoutError):
        return {}
    out: dict[str, float] = {}
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in ENGINE_COUNTERS:
            try:
                out[name] = out.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
            except ValueError:
                continue
    return out


async def _tokenize(session, base: str, model: str, api: str, text: str) -> list[int] | None:
    body = {"model": model, "add_special_tokens": False}
    if api == "chat":
        body.update(messages=[{"role": "user", "content": text}], add_generation_prompt=True)
        body.pop("add_special_tokens")
    else:
        body["prompt"] = text
    d = await _get_json(session, base + "/tokenize", "POST", body)
    if d is None or not isinstance(d.get("tokens"), list):
        return None
    return d["tokens"]


async def _prepare(session, table: RequestTable, cfg: ReplayConfig, model: str) -> tuple[object, dict]:
    """(prompt maker i -> prompt, provenance of the prompts)."""
    base = cfg.endpoint.rstrip("/")
    mode = cfg.prompt
    if mode == "auto":
        mode = "text" if cfg.api == "chat" else "token_ids"
    if mode == "token_ids":
        pool = await _tokenize(session, base, model, "completions", seeded_text(4000, cfg.seed + 1))
        how = "token ids drawn from the server tokenizer's ids of a seeded text (/tokenize)"
        if pool is None:
            if not cfg.vocab_size:
                raise SpecError("the server has no /tokenize endpoint to find ordinary token ids; give --vocab-size "
                                "(ids are drawn from [16, vocab_size)) or --prompt text", field="--prompt")
            pool = np.arange(min(16, cfg.vocab_size - 2), cfg.vocab_size)
            how = f"token ids drawn uniformly from [16, {cfg.vocab_size})"
        tp = TokenPrompts(np.asarray(pool), cfg.seed)
        hids, block = table.hash_ids, table.block_size
        ins = table.input_len.tolist()

        def make(i: int):
            return tp.prompt(i, ins[i], hids[i] if hids is not None else None, block)
        return make, {"prompt_mode": "token_ids", "prompt_method": how + "; exact input lengths",
                      "prefix_structure": hids is not None}

    async def count(text: str) -> int:
        toks = await _tokenize(session, base, model, cfg.api, text)
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


async def _replay(table: RequestTable, cfg: ReplayConfig, hash_block: int) -> tuple[list, dict, float]:
    import aiohttp

    base = cfg.endpoint.rstrip("/")
    conn = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(connector=conn, read_bufsize=1 << 20) as session:
        info = await server_info(session, base)
        model = cfg.model or (info.get("models") or [None])[0]
        if cfg.api != "generate" and not model:
            raise SpecError("the server lists no model; give --model", field="--model")
        if cfg.model and info.get("models") and cfg.model not in info["models"]:
            raise SpecError(f"model {cfg.model!r} is not served here (the server has {', '.join(map(str, info['models']))})",
                            field="--model")
        cfg.model = model
        make, prov = await _prepare(session, table, cfg, model)
        r = Replayer(cfg)
        before = await engine_counters(session, base)
        w0 = time.perf_counter()
        try:
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
    info["interrupted"] = r.stopped
    return results, info, wall


def replay(table: RequestTable, cfg: ReplayConfig, *, name: str = "replay", description: str = "",
           hardware: str = "", model_label: str = "", gpus: int = 1, nodes: float = 1.0,
           workload_source: str = "", hash_block: int | None = None) -> RunRecord:
    """Replay ``table`` against ``cfg.endpoint``; the real run's RunRecord. ``hash_block``: the
    engine's KV block (page) size, the unit of the prompts' recorded prefix hashes
    (prefix_hashes.py; default 16, vLLM's)."""
    import aiohttp

    from ..workload.prefix_hashes import DEFAULT_BLOCK

    date = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    results, info, wall = asyncio.run(_replay(table, cfg, hash_block or DEFAULT_BLOCK))
    from .. import __version__ as pdsim_version

    meta = {
        "kind": "real", "description": description or f"real run against {cfg.endpoint}",
        "hardware": hardware or "unknown", "model": model_label or cfg.model, "endpoint": cfg.endpoint,
        "api": cfg.api, "served_model": cfg.model, "date": date,
        "client": f"pdsim {pdsim_version} replay (aiohttp {aiohttp.__version__}, Python {platform.python_version()})",
        "workload_source": workload_source or table.source, "max_concurrency": cfg.max_concurrency
        or table.max_concurrency, "ignore_eos": cfg.ignore_eos, "timeout_s": cfg.timeout_s, "seed": cfg.seed,
        "request_rate": table.meta.get("request_rate"), "table_meta": dict(table.meta),
    }
    meta.update(info)
    return results_record(table, results, name=name, meta=meta, gpus=gpus, nodes=nodes, wall_s=wall)
