"""Tokens that reached the client in bursts: a client-side artefact of a real run's ITL.

A streaming client stamps each token when its read returns. When the client (or a proxy in front of
the engine) is not scheduled for a while, the events of several engine steps wait in the socket and
come back in one read, all with the same time: gaps of exactly 0 s, and one long gap before them.
The engine stepped evenly; the client's gaps say otherwise. The mean ITL is unchanged (the same
time over the same number of gaps), its percentiles are not. Seen on the 2-core CPU host when the
client shared a core with vLLM's busily polling engine core at the same priority (23-58% of gaps 0,
validation/README.md).
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

ZERO_S = 1e-6  # a gap this short is two events of one read (a real step takes milliseconds)
NOTE_SHARE = 0.05  # below this the bursts hardly move the percentiles


def zero_gap_share(gaps: Iterable[Iterable[float]]) -> tuple[float, int]:
    """(share of inter-token gaps of 0 s, number of gaps) over every request's gaps (seconds)."""
    parts = [np.asarray(list(g), dtype=float) for g in gaps if g is not None]
    allg = np.concatenate(parts) if parts else np.zeros(0)
    if not len(allg):
        return 0.0, 0
    return float((allg < ZERO_S).mean()), int(len(allg))


def record_gaps(rec) -> Iterator[np.ndarray]:
    """Each finished request's inter-token gaps (s) of a real RunRecord with explicit token times:
    the gaps its ITL percentiles are taken from (a request that failed mid-stream has none)."""
    offs, times = rec.tokens.offsets, rec.tokens.times
    drops = rec.requests["drop_reason"]
    for i in range(len(rec)):
        if drops[i] is None and offs[i + 1] - offs[i] > 1:
            yield np.diff(times[offs[i]:offs[i + 1]])


def burst_note(gaps: Iterable[Iterable[float]]) -> str | None:
    """One line saying that the client saw tokens in bursts, or None when under ``NOTE_SHARE``."""
    share, n = zero_gap_share(gaps)
    if share < NOTE_SHARE:
        return None
    return (f"{share:.0%} of the {n:,} inter-token gaps are 0 s: tokens reached the client in bursts (several steps' "
            "events in one read: the client, or a proxy in front, was not scheduled when they were sent), so the "
            "real ITL percentiles are the client's, not the engine's; the mean ITL is not affected (record with "
            "`pdsim replay --fifo 10` or give the client a core of its own: validation/README.md)")
