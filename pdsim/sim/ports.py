"""The few callbacks an instance makes to the rest of the world (its ports).

An instance never imports the world: it is given an object with these methods when it is
built. The world implements them by handing the request to its KV transport (P/D handoff), to
the control plane (retries after a failure) and to the run record.
"""
from __future__ import annotations

from typing import Protocol


class EnginePorts(Protocol):
    def kv_allocated(self, req, inst) -> None:
        """Decode instance ``inst`` has allocated KV pages for ``req``'s prompt (pre-allocation)."""

    def prefill_done(self, req, inst) -> None:
        """Prefill instance ``inst`` finished ``req``'s prompt; its KV is ready to leave."""

    def handoff(self, req, then) -> None:
        """A proxied transport's P has answered for ``req``; call ``then()`` once D's engine has
        the request (after the proxy's hop on placed host cores, else now)."""

    def first_token(self, req) -> None:
        """An instance has set ``req.first_token`` (the request's first token leaves the engine then)."""

    def finished(self, req, inst) -> None:
        """``req`` produced its last token on ``inst``."""

    def dropped(self, req, reason: str) -> None:
        """``req`` cannot be served; ``reason`` names why (it ends up in the run record)."""

    def drained(self, inst) -> None:
        """A draining ``inst`` (being removed) holds nothing any more: its GPUs can go."""

    def evicted(self, req, inst, reason: str) -> None:
        """``inst`` went down (failure, removal) while holding ``req``; everything the instance
        held for it is already released. The world retries it or drops it by its retry policy."""
