"""The offload examples reach the regime the tier choice is about: a host-DRAM pool smaller than
the working set thrashes onto the local SSD and remote storage wins; a pool that holds it
catches up (examples/offload_crossover.py)."""
from __future__ import annotations

import runpy

from builders import REPO


def test_offload_crossover_study(capsys):
    main = runpy.run_path(str(REPO / "examples" / "offload_crossover.py"))["main"]
    rows = {r["tier"]: r for r in main(["--pools", "8", "48", "--requests", "120"])}
    small, big, remote = rows["DRAM 8 GiB"], rows["DRAM 48 GiB"], rows["remote 800G"]
    assert small["evicted_gb"] > 5 and small["ssd_share"] > 0.3  # the pool thrashes
    assert big["evicted_gb"] == 0 and big["ssd_share"] == 0
    assert small["median_ttft_ms"] > 1.3 * remote["median_ttft_ms"]  # remote storage wins
    assert big["median_ttft_ms"] <= 1.01 * remote["median_ttft_ms"]  # a big enough pool catches up
    assert "crossover: a DRAM pool of 48 GiB" in capsys.readouterr().out
