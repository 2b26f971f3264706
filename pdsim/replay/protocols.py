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

from dataclasses import dataclass

from ..specs.workload import MAX_TOKENS as MAX_COUNT  # any count's bound when the request's is not known
from .guards import EVENT, Malformed, TooLong, count, loads, obj, short

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


def sse_payloads(buffer: bytearray, limit: int = EVENT, start: int = 0) -> list[bytes]:
    """Complete ``data:`` payloads at the front of ``buffer`` (consumed); a partial event stays.

    Events end with a blank line; servers send ``\\n\\n`` (some ``\\r\\n\\r\\n``). A partial
    event longer than ``limit`` bytes raises TooLong (a stream without event ends must not
    grow the buffer without bound). ``start``: where an event end can first be (the bytes
    before it were searched already), so a long event is not searched again at every read."""
    out = []
    while True:
        i = buffer.find(b"\n\n", start)
        j = buffer.find(b"\r\n\r\n", start)
        start = 0
        if i < 0 and j < 0:
            if len(buffer) > limit:
                raise TooLong(f"stream event longer than {limit // 2**20} MiB with no end (not read further)")
            return out
        end, sep = (i, 2) if j < 0 or (0 <= i < j) else (j, 4)
        event = bytes(buffer[:end])
        del buffer[:end + sep]
        for line in event.splitlines():
            if line.startswith(b"data:"):
                out.append(line[5:].strip())


def parse_chunk(api: str, payload: bytes, state: dict) -> Chunk | None:
    """One SSE payload -> Chunk; None for ``[DONE]``. ``state`` carries the previous
    cumulative count (SGLang ``/generate`` reports cumulative ``completion_tokens``) and
    ``state["most"]``, the most output tokens the request can have (a larger count is refused).

    An event that is not the API's shape (not UTF-8 JSON, ``choices`` not a list of objects,
    ``usage`` not an object, a count that is not a plausible integer...) raises
    ``guards.Malformed``: the caller fails that request with the reason; an ``error`` event
    from the server is a Chunk with ``error`` set."""
    if payload == b"[DONE]":
        return None
    most = state.get("most", MAX_COUNT)
    d = loads(payload, "stream event")
    if not isinstance(d, dict):
        raise Malformed(f"stream event: expected a JSON object, got {short(payload)}")
    if d.get("error") is not None:  # some servers send "error": null in every event
        err = d["error"]
        return Chunk(0, error=str(err.get("message", err) if isinstance(err, dict) else err)[:300])
    if api == "generate":
        meta = obj(d, "meta_info", "") or {}
        total = count(meta, "completion_tokens", "meta_info.", most)
        prompt = count(meta, "prompt_tokens", "meta_info.", MAX_COUNT)
        prev = state.get("completion_tokens", 0)
        text = obj(d, "text", "", (str,))
        n = (total - prev) if total is not None else (1 if text else 0)
        if total is not None:
            state["completion_tokens"] = total
        fin = obj(meta, "finish_reason", "meta_info.", (dict, str))
        if isinstance(fin, dict):
            fin = fin.get("type")
        return Chunk(max(n, 0), None if fin is None else str(fin), prompt, total)
    usage = obj(d, "usage", "") or {}
    choices = obj(d, "choices", "", (list,)) or []
    n, fin = 0, None
    if choices:
        c = choices[0]
        if not isinstance(c, dict):
            raise Malformed(f"choices[0]: expected an object, got {short(c)}")
        fin = obj(c, "finish_reason", "choices[0].", (str,))
        ids = obj(c, "token_ids", "choices[0].", (list,))
        if ids is not None:
            n = len(ids)
        elif api == "chat":
            delta = obj(c, "delta", "choices[0].", (dict,)) or {}
            n = 1 if obj(delta, "content", "choices[0].delta.", (str,)) else 0
        else:
            n = 1 if obj(c, "text", "choices[0].", (str,)) else 0
    # continuous usage stats: the cumulative count is the authority for this chunk's tokens
    total = count(usage, "completion_tokens", "usage.", most)
    prompt = count(usage, "prompt_tokens", "usage.", MAX_COUNT)
    if total is not None and choices:
        prev = state.get("completion_tokens", 0)
        n = max(total - prev, 0)
        state["completion_tokens"] = total
    return Chunk(n, fin, prompt, total)
