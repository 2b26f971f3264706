"""The serving APIs a replay speaks: request bodies and streamed-chunk parsing.

- ``completions``: OpenAI ``POST /v1/completions`` (vLLM, SGLang, TGI...). vLLM accepts a list
  of token ids as ``prompt`` (exact input length); ``ignore_eos`` and ``min_tokens`` are vLLM /
  SGLang extensions that force exactly ``max_tokens`` tokens; ``return_token_ids`` (vLLM >= 0.10.2)
  makes every chunk say how many tokens it carries.
- ``chat``: OpenAI ``POST /v1/chat/completions``: the prompt is text (a user message), so the
  input length is met by text calibrated to the server's tokenizer (prompts.py).
- ``generate``: SGLang's native ``POST /generate`` with ``input_ids`` and ``sampling_params``;
  chunks carry the cumulative ``meta_info.completion_tokens``.

Every API streams server-sent events (``data: {...}`` lines, ``data: [DONE]`` at the end).
``parse_chunk`` turns one event into (new tokens, finish reason, usage) so the client never
guesses: a chunk's token count comes from the server's own count where the API gives one,
else one token per non-empty delta (bench_serving's convention).
"""
from __future__ import annotations

import json
from dataclasses import dataclass

APIS = {"completions": "/v1/completions", "chat": "/v1/chat/completions", "generate": "/generate"}


@dataclass
class Chunk:
    """One streamed event: ``tokens`` new output tokens (0 for a usage- or role-only event)."""

    tokens: int
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None  # cumulative, when the server reports it
    error: str | None = None


def request_body(api: str, model: str, prompt: list[int] | str, max_tokens: int, *,
                 ignore_eos: bool = True, extra: dict | None = None) -> dict:
    """The JSON body asking for exactly ``max_tokens`` streamed tokens (greedy)."""
    if api == "generate":
        key = "input_ids" if isinstance(prompt, list) else "text"
        sp = {"max_new_tokens": max_tokens, "temperature": 0.0, "ignore_eos": ignore_eos}
        if ignore_eos:
            sp["min_new_tokens"] = max_tokens
        body = {key: prompt, "sampling_params": sp, "stream": True}
    else:
        body = {"model": model, "max_tokens": max_tokens, "temperature": 0.0, "stream": True,
                "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
        if ignore_eos:
            body["ignore_eos"] = True
            body["min_tokens"] = max_tokens
        if api == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
            body["return_token_ids"] = True
    if extra:
        body.update(extra)
    return body


def sse_payloads(buffer: bytearray) -> list[bytes]:
    """Complete ``data:`` payloads at the front of ``buffer`` (consumed); a partial event stays.

    Events end with a blank line; servers send ``\\n\\n`` (some ``\\r\\n\\r\\n``)."""
    out = []
    while True:
        i = buffer.find(b"\n\n")
        j = buffer.find(b"\r\n\r\n")
        if i < 0 and j < 0:
            return out
        end, sep = (i, 2) if j < 0 or (0 <= i < j) else (j, 4)
        event = bytes(buffer[:end])
        del buffer[:end + sep]
        for line in event.splitlines():
            if line.startswith(b"data:"):
                out.append(line[5:].strip())


def parse_chunk(api: str, payload: bytes, state: dict) -> Chunk | None:
    """One SSE payload -> Chunk; None for ``[DONE]``. ``state`` carries the previous
    cumulative count (SGLang ``/generate`` reports cumulative ``completion_tokens``)."""
    if payload == b"[DONE]":
        return None
    try:
        d = json.loads(payload)
    except json.JSONDecodeError:
        return Chunk(0, error=f"unparseable stream event {payload[:80]!r}")
    if not isinstance(d, dict):
        return Chunk(0, error=f"unexpected stream event {payload[:80]!r}")
    if "error" in d:
        err = d["error"]
        return Chunk(0, error=str(err.get("message", err) if isinstance(err, dict) else err)[:300])
    if api == "generate":
        meta = d.get("meta_info") or {}
        total = meta.get("completion_tokens")
        prev = state.get("completion_tokens", 0)
        n = (total - prev) if isinstance(total, int) else (1 if d.get("text") else 0)
        if isinstance(total, int):
            state["completion_tokens"] = total
        fin = meta.get("finish_reason")
        if isinstance(fin, dict):
            fin = fin.get("type")
        return Chunk(max(n, 0), fin, meta.get("prompt_tokens"), total)
    usage = d.get("usage") or {}
    choices = d.get("choices") or []
    n, fin = 0, None
    if choices:
        c = choices[0]
        fin = c.get("finish_reason")
        ids = c.get("token_ids")
        if isinstance(ids, list):
            n = len(ids)
        else:
            delta = c.get("delta", {}).get("content") if api == "chat" else c.get("text")
            n = 1 if delta else 0
    # continuous usage stats: the cumulative count is the authority for this chunk's tokens
    total = usage.get("completion_tokens")
    if isinstance(total, int) and choices:
        prev = state.get("completion_tokens", 0)
        n = max(total - prev, 0)
        state["completion_tokens"] = total
    return Chunk(n, fin, usage.get("prompt_tokens"), total)
