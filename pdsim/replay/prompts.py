"""Prompts of exact token lengths for a replay.

Two ways, and the run's metadata says which was used:

- ``token_ids`` (exact): the prompt is a list of token ids (vLLM ``/v1/completions`` and
  SGLang ``/generate`` accept them; the server does not re-tokenize). Ids are drawn from a
  pool of ordinary ids the server's own tokenizer produced for a seeded text (``/tokenize``),
  so no special token (BOS/EOS/pad) lands in a prompt; without ``/tokenize`` the pool is
  ``[first_id, vocab_size)``.
- ``text`` (calibrated): for APIs that take text only (chat), words are added or removed
  until the server's ``/tokenize`` (with the chat template applied, for chat) counts the
  asked length; the counted length is kept per request (``prompt_tokens``).

Prefix structure: a request with Mooncake-style ``hash_ids`` gets, per block id, the same
``block_size`` tokens in every request that shares the id (a seeded draw per id), so the
real server's prefix cache sees the reuse the trace describes.
"""
from __future__ import annotations

import numpy as np

WORDS_SEED = 20251123


def seeded_text(n_words: int, seed: int = WORDS_SEED) -> str:
    """Pseudo-English text of ``n_words`` words (deterministic)."""
    rng = np.random.default_rng(seed)
    syl = ["the", "an", "in", "er", "on", "at", "en", "re", "ing", "ed", "to", "of", "and", "is", "it", "or",
           "al", "ar", "st", "ent", "ion", "ter", "ver", "pro", "com", "con", "de", "ly", "ment", "ness"]
    lens = rng.integers(1, 4, n_words)
    picks = rng.integers(0, len(syl), int(lens.sum()))
    words, k = [], 0
    for n in lens.tolist():
        words.append("".join(syl[j] for j in picks[k:k + n].tolist()))
        k += n
    return " ".join(words)


class TokenPrompts:
    """Token-id prompts from a pool of ordinary ids; deterministic per (seed, request, block)."""

    def __init__(self, pool: np.ndarray, seed: int = 0):
        pool = np.unique(np.asarray(pool, dtype=np.int64))
        if pool.size < 2:
            raise ValueError("need at least two distinct token ids to build prompts")
        self.pool = pool
        self.seed = seed

    def _draw(self, key: tuple[int, ...], n: int) -> list[int]:
        rng = np.random.default_rng((self.seed, *key))
        return self.pool[rng.integers(0, self.pool.size, n)].tolist()

    def prompt(self, index: int, length: int, hash_ids: np.ndarray | None = None, block_size: int = 512) -> list[int]:
        """``length`` token ids for request ``index``; blocks named by ``hash_ids`` are shared."""
        if hash_ids is None or len(hash_ids) == 0:
            return self._draw((1, index), length)
        out: list[int] = []
        for h in np.asarray(hash_ids).tolist():
            if len(out) >= length:
                break
            # the block's tokens depend on its id only: equal ids give equal blocks
            out.extend(self._draw((2, int(h) & 0x7FFFFFFFFFFFFFFF), min(block_size, length - len(out))))
        if len(out) < length:
            out.extend(self._draw((1, index), length - len(out)))
        return out


class TextCalibrator:
    """Text whose token count on the server is exactly the asked length.

    ``count(text) -> int`` asks the server's tokenizer (with the API's template); a binary search
    over the number of seeded words finds the longest text not over the target, then single
    characters top it up. Lengths are cached (one search per distinct length)."""

    def __init__(self, count, words: int = 20000, seed: int = WORDS_SEED):
        self.count = count
        self.words = seeded_text(words, seed).split(" ")
        self.cache: dict[int, tuple[str, int]] = {}

    async def text(self, length: int) -> tuple[str, int]:
        """(text, counted tokens); counted == length unless the tokenizer cannot reach it."""
        if length in self.cache:
            return self.cache[length]
        lo, hi = 0, min(len(self.words), max(1, length))
        best = ("", await self.count(""))
        while lo < hi:  # largest word count whose text has <= length tokens
            mid = (lo + hi + 1) // 2
            t = " ".join(self.words[:mid])
            n = await self.count(t)
            if n <= length:
                lo, best = mid, (t, n)
            else:
                hi = mid - 1
        text, n = best
        for ch in "abcdefghijklmnopqrstuvwxyz" * 4:  # top up one character at a time
            if n >= length:
                break
            t = text + " " + ch
            m = await self.count(t)
            if m <= length:
                text, n = t, m
        self.cache[length] = (text, n)
        return text, n
