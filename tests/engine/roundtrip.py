"""What the engine tests share: the round trip every engine takes
(`pdsim replay` of a short Poisson run into a server, then `pdsim validate` of the recording against
the engine's scenario, both through the CLI)."""
from __future__ import annotations

import json
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def replay_into(url: str, tmp_path: Path, requests: int, name: str):
    """Record ``requests`` Poisson requests (4 req/s, 64-512-token prompts, 16-64 output tokens)
    against ``url``; returns the recording as ``pdsim.ingest.read_run`` reads it, after checking that
    every request completed with every token timed."""
    from pdsim.cli import main
    from pdsim.ingest import read_run

    wl = tmp_path / "wl.yaml"
    wl.write_text(yaml.safe_dump({"kind": "synthetic", "num_requests": requests, "rate": 4, "arrival": "poisson",
                                  "input": {"dist": "uniform", "min": 64, "max": 512},
                                  "output": {"dist": "uniform", "min": 16, "max": 64}}))
    out = tmp_path / "real"
    assert main(["replay", str(wl), "--endpoint", url, "--out", str(out), "--no-progress", "--seed", "7",
                 "--name", name]) == 0
    ing = read_run(out)
    req = ing.record.requests
    assert ing.format == "pdsim-replay" and len(ing.record) == requests
    assert all(d is None for d in req["drop_reason"]), set(req["drop_reason"])
    assert (req["output_tokens"] == req["output_len"]).all()  # ignore_eos honoured, every token timed
    return ing


def validate_against(tmp_path: Path, scenario: str, requests: int) -> None:
    """`pdsim validate` of ``tmp_path/real`` against ``scenario`` (a path under the repo): it runs to
    its verdict (0 or 3), writes its page, and simulates every request the engine completed."""
    from pdsim.cli import main

    vout = tmp_path / "val"
    rc = main(["validate", str(tmp_path / "real"), "--scenario", str(ROOT / scenario), "--out", str(vout),
               "--tolerance", "output_throughput=0.5"])
    assert rc in (0, 3) and (vout / "validation.html").is_file()
    summ = json.loads((vout / "summaries.json").read_text())
    assert summ["real"]["completed"] == summ["simulated"]["completed"] == requests
