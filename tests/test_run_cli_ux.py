"""pdsim run's words and numbers: each hardware named in the header, no per-node rates for a
run on part of a node, an unwritable --out refused before simulating, a progress line per
re-simulated suggestion, and --verdict-budget-s."""
from __future__ import annotations

import pytest
import yaml

import pdsim
from pdsim.cli import main
from pdsim.cli.run_cmd import hardware_text
from pdsim.report.figures import summary_rows

from builders import scenario_dict


def test_header_names_each_hardware():
    assert hardware_text(pdsim.load_scenario("dsv3-h800p-h20d")) == "48 GPUs: 32 h800 (4 nodes) + 16 h20 (2 nodes)"
    assert hardware_text(pdsim.load_scenario("llama8b-a800-1p1d")) == "2 GPUs of a800 (part of one node)"
    assert hardware_text(pdsim.load_scenario("dsv3-h800-p4d9")) == "104 GPUs of h800 (13 nodes)"


def test_no_per_node_rate_under_one_node():
    rows = dict(summary_rows({"nodes": 0.25, "output_throughput_per_node": 6155.0, "output_throughput_per_gpu": 1538.0}))
    assert rows["output tokens/s per node"] == "n/a" and rows["output tokens/s per GPU"] == "1538"
    rows = dict(summary_rows({"nodes": 2.0, "output_throughput_per_node": 6155.0}))
    assert rows["output tokens/s per node"] == "6155"


def test_unwritable_out_is_refused_before_simulating(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["run", "llama8b-a800-1p1d", "--out", str(blocker / "sub"), "--no-progress"]) == 2
    cap = capsys.readouterr()
    assert "--out" in cap.err and "pdsim run:" not in cap.out  # nothing was simulated


@pytest.mark.parametrize("budget", ["30", "0"])
def test_suggestion_checks_print_a_progress_line(tmp_path, capsys, budget):
    d = scenario_dict(slo={"ttft_ms": 2000, "tpot_ms": 50})
    d["workload"].update(num_requests=200, rate=30.0, input={"dist": "uniform", "min": 2000, "max": 6000})
    path = tmp_path / "over.yaml"
    path.write_text(yaml.safe_dump(d))
    assert main(["run", str(path), "--no-progress", "--verdict-budget-s", budget]) == 0
    cap = capsys.readouterr()
    if budget == "30":
        assert "checking suggestion 1/" in cap.err and "checked:" in cap.out
    else:
        assert "checking suggestion" not in cap.err and "verdict-check budget (0.0 s" in cap.out
    with pytest.raises(SystemExit):
        main(["run", str(path), "--verdict-budget-s", "-1"])
