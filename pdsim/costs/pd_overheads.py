"""Fixed costs of a P/D request outside the engines (seconds): router / HTTP path, bootstrap
handshake, first contact of a (P, D) pair.

SGLang P/D (DOMAIN.md s1): a load balancer picks one P and one D and sends the request to both;
D allocates KV and tells P where to write it through P's bootstrap server (a ZMQ message with
the room id and D's KV page indices); P prefills, writes the KV and returns; D then decodes, and
the first token the user sees leaves D only after D's first decode step that contains the
request (the world prices that with D's own step, not a constant: see the issue-12 report).

- ``router``: one extra HTTP hop in (client -> router -> P and D, in parallel) and the streamed
  first token's hop out (D -> router -> client);
- ``bootstrap``: D's handshake with P per request, before P may send KV (overlaps P's prefill:
  it delays the transfer start only when it ends after the prefill);
- ``connect``: the first handshake of a (P, D) pair: transfer-engine endpoint exchange and RDMA
  queue-pair setup, once per pair.

No public measurement isolates these, so the defaults are assumptions with the relative
uncertainties below (``pdsim sensitivity`` perturbs them): ~1 ms for an HTTP hop through a
Python proxy (mini_lb / aiohttp) on one host, ~1 ms for a ZMQ round trip with metadata, tens of
ms for RDMA connection setup.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..specs.features import PDOverheadSpec

ROUTER_MS = 1.0  # assumption
BOOTSTRAP_MS = 1.0  # assumption
CONNECT_MS = 50.0  # assumption
UNCERTAINTY = {"router_ms": 1.0, "bootstrap_ms": 1.0, "connect_ms": 1.0}


@dataclass(frozen=True)
class PDFixedCosts:
    ingress_s: float  # request arrival -> P and D see it
    bootstrap_s: float  # D's handshake with P (first contact included) before KV may move
    egress_s: float  # D emits a token -> the client sees it


def pd_fixed_costs(spec: PDOverheadSpec | None = None, first_contact: bool = False) -> PDFixedCosts:
    """The fixed costs of one request; ``first_contact``: the first request of this (P, D) pair."""
    spec = spec or PDOverheadSpec()
    router = (spec.router_ms if spec.router_ms is not None else ROUTER_MS) * 1e-3
    boot = (spec.bootstrap_ms if spec.bootstrap_ms is not None else BOOTSTRAP_MS) * 1e-3
    if first_contact:
        boot += (spec.connect_ms if spec.connect_ms is not None else CONNECT_MS) * 1e-3
    return PDFixedCosts(router, boot, router)
