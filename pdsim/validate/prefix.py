"""A real run's prefix structure carried into its simulation: the prompts' chained block hashes
(workload/prefix_hashes.py) re-blocked to the scenario's page size, so the simulated prefix
cache sees the reuse the real engine saw."""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..workload.prefix_hashes import reblock, repeat_share
from ..workload.table import RequestTable

NOT_CARRIED = ("prefix structure: not carried (the file has no prompt token ids or block hashes): simulated "
               "without prefix-cache hits")


def _pages(scenario) -> list[int]:
    return sorted({int(g.engine.page_size) for _, _, g in scenario.scenario.cluster.groups()})


def with_prefix(table: RequestTable, meta: dict, order: np.ndarray, scenario) -> tuple[RequestTable, str]:
    """(``table`` with the run's hash ids in table order, a note saying what was carried)."""
    hids, block = meta.get("prompt_hash_ids"), meta.get("prompt_hash_block_size")
    if hids is None:
        return table, NOT_CARRIED
    n = max(int(order.max()) + 1, 0) if len(order) else 0
    ok = (isinstance(block, int) and not isinstance(block, bool) and block >= 1 and isinstance(hids, list)
          and len(hids) >= n and all(isinstance(h, list) and all(isinstance(x, int) for x in h) for h in hids))
    if not ok:
        return table, ("prefix structure: prompt_hash_ids present but malformed (expected one list of integer ids "
                       "per request and a prompt_hash_block_size >= 1): ignored, simulated without prefix-cache hits")
    to = block
    for p in _pages(scenario):
        to = to * p // math.gcd(to, p)  # the smallest block every page size divides
    ins = table.input_len.tolist()
    out = []
    for row, k in enumerate(order.tolist()):
        h = hids[k]
        if len(h) != math.ceil(ins[row] / block):  # a prompt that does not match its recorded length
            return table, (f"prefix structure: request {k} has {len(h)} block ids for {ins[row]} prompt tokens in "
                           f"{block}-token blocks: ignored, simulated without prefix-cache hits")
        out.append(reblock(h, block, to, ins[row], k))
    share = repeat_share([o.tolist() for o in out])
    src = meta.get("prompt_hash_source", "prompt token ids")
    note = (f"prefix structure: carried from {src} ({block}-token block hashes"
            + (f" re-blocked to {to}" if to != block else "") + f"; {share:.0%} of prompt blocks repeat an earlier "
            "request's)")
    return dataclasses.replace(table, hash_ids=out, block_size=to), note
