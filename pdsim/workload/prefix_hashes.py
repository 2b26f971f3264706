"""A prompt's prefix structure as chained block hashes, as vLLM's prefix cache keys its blocks.

vLLM (``vllm/v1/core/kv_cache_utils.py``, ``hash_block_tokens``) keys each *full* block of
``block_size`` prompt tokens by a hash of (the previous block's hash, this block's token ids):
two prompts share block j's key exactly when their first (j + 1) x block_size tokens are equal.
A partial last block is never cached. pdsim's trace convention (workload/trace_rows.py, the
Mooncake ``hash_ids``) wants ceil(input_len / block) ids per request; the partial last block
gets an id salted with the request's index, so it never matches another request's (as in vLLM).

A real run carries them as ``RunRecord.meta['prompt_hash_ids']`` (one list per request, in the
record's order) and ``meta['prompt_hash_block_size']``: ``pdsim replay`` writes them (token-id
prompts), the real-run readers fill them when the source has the prompts' token ids, and
``pdsim validate`` re-blocks them to the scenario's page size and simulates the cache hits.
"""
from __future__ import annotations

import hashlib
import math
from typing import Sequence

import numpy as np

DEFAULT_BLOCK = 16  # vLLM's default --block-size on GPUs (its CPU backend's validation engine runs 128)
_MASK = (1 << 63) - 1


def _h(*parts: object) -> int:
    return int.from_bytes(hashlib.blake2b(repr(parts).encode(), digest_size=8).digest(), "little") & _MASK


def block_hashes(token_ids: Sequence[int], block_size: int, request: int) -> list[int]:
    """ceil(len / block_size) chained ids: full blocks keyed by (parent, tokens), a partial last
    block by (parent, request) so it is this request's own."""
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    ids = [int(t) for t in token_ids]
    out, parent = [], 0
    for a in range(0, len(ids), block_size):
        blk = ids[a:a + block_size]
        parent = _h(parent, tuple(blk)) if len(blk) == block_size else _h(parent, "partial", request)
        out.append(parent)
    return out


def reblock(hashes: Sequence[int], block: int, to_block: int, input_len: int, request: int) -> np.ndarray:
    """Chained ids at ``block`` tokens as ids at ``to_block`` (a multiple of ``block``): a
    coarse block is named by the chained id of its last fine block (which names the whole
    prefix up to it); a partial last coarse block is this request's own."""
    if to_block % block:
        raise ValueError(f"cannot re-block {block}-token hashes to {to_block} tokens (not a multiple)")
    k = to_block // block
    n = math.ceil(input_len / to_block)
    out = []
    for j in range(n):
        last = min((j + 1) * k, len(hashes)) - 1
        full = (j + 1) * to_block <= input_len
        out.append(int(hashes[last]) if full else _h(int(hashes[last]), "partial", request))
    return np.asarray(out, dtype=np.int64)


def repeat_share(hashes: Sequence[Sequence[int]]) -> float:
    """Share of blocks whose id an earlier request already had (an upper bound on cache hits)."""
    seen: set[int] = set()
    hit = total = 0
    for hs in hashes:
        for h in hs:
            hit += h in seen
            total += 1
        seen.update(hs)
    return hit / total if total else 0.0


def hashes_of_logged_ids(id_lists: Sequence[str], block_size: int) -> dict:
    """``meta`` entries for prompts logged as comma-separated token ids (vLLM's request log);
    {} when an entry is not a list of integers (a truncated or redacted log)."""
    out = []
    for i, text in enumerate(id_lists):
        try:
            ids = [int(x) for x in text.split(",") if x.strip()]
        except ValueError:
            return {}
        out.append(block_hashes(ids, block_size, i))
    return {"prompt_hash_ids": out, "prompt_hash_block_size": block_size}


def session_hashes(conversations: Sequence, turns: Sequence, input_lens: Sequence[int], output_lens: Sequence[int],
                   block_size: int) -> dict:
    """``meta`` entries for a multi-turn run known by conversation ids only (AIPerf records
    ``conversation_id`` and ``turn_index``, not the prompts). Assumption, as a chat client sends
    turns: turn k's prompt is the conversation so far (the previous turn's prompt and answer)
    followed by the new message, so its first min(L_k, L_{k-1} + O_{k-1}) tokens repeat the
    previous turn's sequence. A turn whose prompt is shorter than that sequence does not extend
    it (the assumption fails there) and starts a stream of its own. Block j of a stream has one id
    for every turn of it; a partial last block is the request's own. {} without conversation ids."""
    if not conversations or all(c is None for c in conversations):
        return {}
    by_conv: dict = {}
    for i, (c, t) in enumerate(zip(conversations, turns)):
        if c is not None:
            by_conv.setdefault(c, []).append((t if isinstance(t, (int, float)) else 0, i))
    out: list[list[int] | None] = [None] * len(input_lens)
    shared = 0
    for c, items in by_conv.items():
        stream, prev_seq = 0, None
        for _, i in sorted(items, key=lambda x: (x[0], x[1])):
            L = int(input_lens[i])
            if prev_seq is None or L < prev_seq:
                stream += 1  # the first turn, or a turn that does not extend the previous sequence
            else:
                shared += 1
            ids = [_h("session", str(c), stream, j) for j in range(L // block_size)]
            if L % block_size:
                ids.append(_h("partial", i))
            out[i] = ids
            prev_seq = L + int(output_lens[i])
    for i, h in enumerate(out):  # requests without a conversation id: their own blocks
        if h is None:
            out[i] = [_h("own", i, j) for j in range(math.ceil(int(input_lens[i]) / block_size))]
    return {"prompt_hash_ids": out, "prompt_hash_block_size": block_size,
            "prompt_hash_source": f"conversation ids ({shared} turns extend their previous turn; assumed chat history)"}
