"""Multi-turn conversations and tool-using agents: sessions that resend a growing context.

Turn k's prompt is the shared system prompt, every earlier user message (or tool output) and
answer of its session, and the new message, so consecutive turns share a growing prefix.
Prompts carry prefix-chained ``hash_ids`` (Mooncake convention: one id per ``block_size``-token
block, equal id k implies equal blocks before it) so the world's prefix cache sees the reuse:

- whole blocks of the system prompt have ids shared by every session;
- a block, once whole in a session's context, keeps its id in every later turn;
- the last, partial block of a prompt gets a fresh id: the next turn fills it with other
  tokens, so its content (and a real cache's hash of it) differs.
"""
from __future__ import annotations

import numpy as np

from ..specs.workload import ConversationSpec, LengthDist, check_request_count
from .generators import sample_lengths
from .shaping import arrivals
from .table import RequestTable

# A tool-using agent loop: long tool definitions shared by every session, each tool output
# resubmitted with the whole context within about a second, short answers (mostly tool
# calls). Illustrative parameters of ours, not fitted to a published trace.
TOOL_AGENT = ConversationSpec(sessions=50, session_rate=0.5, turns=LengthDist("uniform", min=3, max=12),
                              system_prompt_tokens=2048,
                              user=LengthDist("lognormal", mean=800, std=600, min=16, max=16384),
                              think_time_s=0.8, decode_s_per_token=0.03)
AGENT_OUTPUT = LengthDist("normal", mean=120, std=60, min=8, max=1024)


def conversations(conv: ConversationSpec, output: LengthDist, rng: np.random.Generator,
                  block_size: int = 512, label: str = "conversations") -> RequestTable:
    """Requests of ``conv.sessions`` sessions, sorted by arrival (s, from the first).

    Session starts are Poisson at ``session_rate``; turn k+1 arrives after turn k's expected
    decode time (output tokens x ``decode_s_per_token``) plus an exponential think time of
    mean ``think_time_s`` (an open-loop approximation of a user waiting for the answer).
    """
    starts = arrivals(conv.sessions, conv.session_rate, 1.0, rng)
    turns = sample_lengths(conv.turns, conv.sessions, rng)
    check_request_count(int(turns.sum()), "conversation.turns",
                        f"requests ({conv.sessions:,} sessions of {turns.mean():.3g} turns drawn on average)")
    B = block_size
    sys_blocks = conv.system_prompt_tokens // B
    next_id = sys_blocks  # ids 0..sys_blocks-1: the shared system prompt's whole blocks
    rows: list[tuple[float, int, int, np.ndarray]] = []
    for s in range(conv.sessions):
        t = float(starts[s])
        ctx = conv.system_prompt_tokens
        whole: list[int] = list(range(sys_blocks))  # ids of the context's whole blocks
        for _k in range(int(turns[s])):
            user = int(sample_lengths(conv.user, 1, rng)[0])
            out = int(sample_lengths(output, 1, rng)[0])
            prompt = ctx + user
            while len(whole) < prompt // B:
                whole.append(next_id)
                next_id += 1
            ids = whole[: prompt // B]
            if prompt % B:
                ids = ids + [next_id]  # the partial tail: its content changes next turn
                next_id += 1
            rows.append((t, prompt, out, np.asarray(ids, dtype=np.int64)))
            ctx = prompt + out
            think = rng.exponential(conv.think_time_s) if conv.think_time_s else 0.0
            t = t + out * conv.decode_s_per_token + think
    rows.sort(key=lambda r: r[0])  # stable: equal times keep session order
    t0 = rows[0][0] if rows else 0.0
    return RequestTable(np.array([r[0] - t0 for r in rows]), np.array([r[1] for r in rows], dtype=np.int64),
                        np.array([r[2] for r in rows], dtype=np.int64), hash_ids=[r[3] for r in rows],
                        block_size=block_size, source=label)
