"""Study: where should KV offload live for DeepSeek-R1 on one H20 node (TP8)?

Host DRAM (an LMCache pool of ``--dram-gib`` that spills to local NVMe when full), remote
NVMe-oF storage over 400G RoCE, or over 800G RoCE. A cache-reuse workload: ``--prompts``
distinct prompts of each input length, asked ``--rounds`` times round-robin by a closed-loop
client at ``--concurrency``. Prints mean and std of TTFT (all requests, and 'warm': the rounds
after the first, which can only hit the cache) and total token throughput per tier.

    python benchmarks/study_offload_tiers.py [--lengths 100 1000 10000 50000 100000]
"""
from __future__ import annotations

import argparse

import numpy as np

import pdsim
from pdsim.metrics import Results
from pdsim.sim.world import World
from pdsim.workload import RequestTable

TIERS = {
    "dram": "dsr1-h20-offload-dram",
    "remote-400g": "dsr1-h20-offload-remote400g",
    "remote-800g": "dsr1-h20-offload-remote800g",
}


def repeated_prompts(prompts: int, rounds: int, tokens: int, out: int, concurrency: int, block: int = 512):
    nb = -(-tokens // block)
    n = prompts * rounds
    hashes = [np.arange((i % prompts) * nb, (i % prompts + 1) * nb, dtype=np.int64) for i in range(n)]
    return RequestTable(np.zeros(n), np.full(n, tokens), np.full(n, out), hash_ids=hashes, block_size=block,
                        max_concurrency=concurrency, source=f"repeated {prompts}x{rounds} of {tokens}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", type=int, nargs="+", default=[100, 1000, 10000, 50000, 100000])
    ap.add_argument("--prompts", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--output", type=int, default=100)
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--dram-gib", type=float, default=256.0)
    args = ap.parse_args()
    print(f"{'input':>7} {'tier':<12} {'mean TTFT ms':>12} {'std TTFT ms':>11} {'warm mean':>9} {'warm std':>9} "
          f"{'tokens/s':>9} {'cache hit':>9} {'DRAM->SSD GB':>12} {'SSD read GB':>11}")
    for L in args.lengths:
        for tier, key in TIERS.items():
            over = {"kv_offload.tiers[0].capacity_gib": args.dram_gib} if tier == "dram" else {}
            sc = pdsim.load_scenario(key, over)
            table = repeated_prompts(args.prompts, args.rounds, L, args.output, args.concurrency)
            res = Results(World(sc, table).run(), sc)
            s = res.summary()
            fin = res.requests[res.requests["finished"]]
            warm = fin[fin["request_id"] >= args.prompts]  # rounds after the first: reuse only
            ssd = [t for t in s.get("tiers", []) if t["device"] == "local_ssd"]
            print(f"{L:>7} {tier:<12} {fin['ttft_s'].mean() * 1e3:>12.1f} {fin['ttft_s'].std() * 1e3:>11.1f} "
                  f"{warm['ttft_s'].mean() * 1e3:>9.1f} {warm['ttft_s'].std() * 1e3:>9.1f} "
                  f"{s['total_throughput']:>9.0f} {s['prefix_cache_hit_rate']:>9.1%} "
                  f"{(ssd[0]['bytes_written'] / 1e9 if ssd else 0):>12.1f} {(ssd[0]['bytes_read'] / 1e9 if ssd else 0):>11.1f}")


if __name__ == "__main__":
    main()
