"""vLLM's xPyD proxy for P2P NCCL disaggregation (``vllm_xpyd``).

Source: vllm-project/vllm
``examples/online_serving/disaggregated_serving_p2p_nccl_xpyd/disagg_proxy_p2p_nccl_xpyd.py``
(https://github.com/vllm-project/vllm/tree/main/examples/online_serving/disaggregated_serving_p2p_nccl_xpyd).

Semantics of the proxy, and how pdsim maps them:
- instances register with the proxy (their heartbeat every 3 s carries their addresses); the
  proxy keeps one list of prefill and one of decode instances in registration order. pdsim:
  the membership's views, in registration order;
- one request counter ``count`` shared by both roles: request k goes to prefill
  ``P[k mod |P|]`` and decode ``D[k mod |D|]``, then ``count`` advances. Round robin, load-
  blind, with the P/D pairing fixed by the counter (with 2 P and 4 D, P0 always pairs with D0
  or D2). When the lists change size the counter is not reset, so the rotation continues
  from wherever ``count`` modulo the new size lands (unlike ``round_robin``, which keeps one
  counter per role);
- the proxy sends P a copy with ``max_tokens = 1``, waits for it, then streams D's answer; the
  KV moves over the NCCL connection P set up with D. pdsim models that handoff in the
  transport (``transfer.backend: nccl``), not in the router;
- with no instance of a role registered the proxy fails the request (a modulo by zero);
  pdsim holds it until an instance registers.
"""
from __future__ import annotations

from ..router import ROUTERS, Hold, Route, Router


@ROUTERS.register("vllm_xpyd")
class VLLMxPyD(Router):
    """See the module docstring."""

    def __init__(self, params=None, rng=None):
        super().__init__(params, rng)
        self.count = 0

    def route(self, req, members):
        if members.disaggregated:
            ps, ds = members.views("prefill"), members.views("decode")
        else:
            ps = ds = members.views("colocated")
        if not ps or not ds:
            return Hold()
        k = self.count
        self.count += 1
        p = ps[k % len(ps)]
        return Route(p, ds[k % len(ds)] if members.disaggregated else p)
