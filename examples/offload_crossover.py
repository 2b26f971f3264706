"""Where should KV offload live: host DRAM or remote storage? The crossover in one table.

DeepSeek-R1 TP8 on one H20 node serves 16 shared 32k-token prefixes (~37 GB of KV) asked at
random (workloads/scenarios/dsr1-h20-offload-thrash-dram.yaml). The host-DRAM LMCache pool
spills to a local NVMe SSD when full; remote NVMe-oF storage (400G or 800G RoCE) holds
everything. While the pool is smaller than the working set it thrashes (LRU over a cyclic-ish
reuse evicts what is asked next) and warm prompts load from the SSD at 6.8 GB/s, so remote
storage wins; once the pool holds the working set, DRAM's PCIe bandwidth wins by a little.

    python examples/offload_crossover.py                 # ~10 s
    python examples/offload_crossover.py --pools 8 16 32 64 --requests 200
"""
from __future__ import annotations

import argparse

import pdsim

DRAM = "dsr1-h20-offload-thrash-dram"
REMOTE = {"remote 400G": ("dsr1-h20-offload-thrash-remote800g", ["kv_offload.tiers[0].device=remote-nvmeof-400g"]),
          "remote 800G": ("dsr1-h20-offload-thrash-remote800g", [])}


def row(label: str, key: str, overrides: list[str]) -> dict:
    res = pdsim.simulate(pdsim.load_scenario(key, overrides))
    s = res.summary()
    tiers = res.record.stats.get("tiers") or []
    evicted = sum(t.get("bytes_evicted", 0.0) for t in tiers) / 1e9
    ssd = sum(t.get("hit_blocks", 0) for t in tiers if t.get("device") == "local_ssd")
    hits = sum(t.get("hit_blocks", 0) for t in tiers)
    return {"tier": label, "median_ttft_ms": s["median_ttft_ms"], "mean_ttft_ms": s["mean_ttft_ms"],
            "evicted_gb": evicted, "ssd_share": ssd / hits if hits else 0.0, "goodput": s["goodput_share"]}


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pools", type=float, nargs="+", default=[8, 16, 24, 32, 48],
                    help="host-DRAM pool sizes to try (GiB)")
    ap.add_argument("--requests", type=int, default=400, help="requests per run")
    args = ap.parse_args(argv)
    common = [f"workload.num_requests={args.requests}"]
    rows = [row(f"DRAM {g:g} GiB", DRAM, common + [f"kv_offload.tiers[0].capacity_gib={g:g}"]) for g in args.pools]
    rows += [row(label, key, common + over) for label, (key, over) in REMOTE.items()]
    print(f"{'KV offload tier':<16} {'median TTFT ms':>14} {'mean TTFT ms':>12} {'evicted GB':>10} "
          f"{'loads from SSD':>14} {'goodput':>8}")
    for r in rows:
        print(f"{r['tier']:<16} {r['median_ttft_ms']:>14,.0f} {r['mean_ttft_ms']:>12,.0f} {r['evicted_gb']:>10,.1f} "
              f"{r['ssd_share']:>14.0%} {r['goodput']:>8.1%}")
    best_remote = min(r["median_ttft_ms"] for r in rows if r["tier"].startswith("remote"))
    caught_up = [r for r in rows if r["tier"].startswith("DRAM") and r["median_ttft_ms"] <= best_remote * 1.01]
    if caught_up:
        print(f"crossover: a DRAM pool of {caught_up[0]['tier'][5:]} or more serves warm prompts as fast as remote "
              f"storage (median {caught_up[0]['median_ttft_ms']:,.0f} ms against {best_remote:,.0f} ms); smaller "
              "pools thrash onto the local SSD")
    else:
        print(f"no DRAM pool tried matches remote storage (median {best_remote:,.0f} ms): every one thrashes")
    return rows


if __name__ == "__main__":
    main()
