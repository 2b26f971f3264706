"""The CLI end to end: files written, overrides, listings, clean errors with exit status 2."""
from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest
import yaml

from pdsim.cli import main

from builders import scenario_dict


def _write(tmp_path, d, name="s.yaml"):
    p = tmp_path / name
    p.write_text(yaml.safe_dump(d))
    return p


def test_run_writes_summary_tables_and_report(tmp_path, capsys):
    p = _write(tmp_path, scenario_dict())
    out = tmp_path / "out"
    assert main(["run", str(p), "--out", str(out), "--no-progress"]) == 0
    s = json.loads((out / "summary.json").read_text())
    for key in ("mean_ttft_ms", "median_ttft_ms", "p90_ttft_ms", "p99_ttft_ms", "mean_itl_ms", "p99_itl_ms",
                "mean_tpot_ms", "mean_e2e_latency_ms", "request_throughput", "input_throughput",
                "output_throughput", "output_throughput_per_node", "goodput_share", "request_goodput"):
        assert key in s, key
    req = pd.read_parquet(out / "requests.parquet")
    assert len(req) == 60 and {"arrival_s", "prefill_start_s", "transfer_end_s", "first_token_s",
                               "finish_s", "drop_reason", "prefill_instance", "decode_instance"} <= set(req.columns)
    tl = pd.read_parquet(out / "timeline.parquet")
    assert {"instance", "link"} <= set(tl["kind"])
    html = (out / "report.html").read_text()
    assert "plotly" in html.lower() and "Latency CDFs" in html
    assert "mean TTFT" in capsys.readouterr().out


def test_run_csv_and_set_overrides(tmp_path):
    p = _write(tmp_path, scenario_dict())
    out = tmp_path / "o"
    assert main(["run", str(p), "--out", str(out), "--format", "csv", "--no-report", "--no-progress",
                 "--set", "cluster.decode.count=2", "--set", "workload.num_requests=10"]) == 0
    req = pd.read_csv(out / "requests.csv")
    assert len(req) == 10 and req["decode_instance"].nunique() == 2


def test_list_shows_bundled_data(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for word in ("h800", "h20", "a800", "deepseek-v3", "llama-3.1-8b", "dsv3-h800-p4d6", "round_robin"):
        assert word in out


@pytest.mark.parametrize("mutate, expect", [
    (lambda d: d["cluster"]["prefill"][0].update(gpus=3), "cluster.prefill[0].gpus: 3 GPUs do not divide"),
    (lambda d: d.update(model="deepseek-v3"), "does not fit"),
    (lambda d: d.update(bogus=1), "bogus: unknown field"),
    (lambda d: d.update(router={"policy": "nope"}), "router.policy: unknown router 'nope'"),
    (lambda d: d.update(router={"policy": "no_such_mod:Cls"}), "not an allowed plug-in source"),
])
def test_bad_input_exits_2_without_traceback(tmp_path, mutate, expect):
    d = scenario_dict()
    mutate(d)
    p = _write(tmp_path, d)
    r = subprocess.run([sys.executable, "-m", "pdsim", "run", str(p), "--no-progress"], capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and expect in r.stderr
    assert r.stderr.startswith("error: ") and str(p) in r.stderr


def test_missing_file_is_a_clean_error(capsys):
    assert main(["run", "/nonexistent/x.yaml"]) == 2
    assert "no such scenario file" in capsys.readouterr().err


def test_router_plugin_by_module_path(tmp_path, capsys):
    d = scenario_dict()
    d["cluster"]["decode"][0]["count"] = 3
    d["router"] = {"policy": "plugin_router:AlwaysLast"}
    p = _write(tmp_path, d)
    (tmp_path / "plugin_router.py").write_text(
        "from pdsim.sim import Router\n"
        "class AlwaysLast(Router):\n"
        "    def pick_prefill(self, req, instances):\n"
        "        return instances[-1]\n")
    sys.path.insert(0, str(tmp_path))
    try:
        out = tmp_path / "o"
        # refused (and not imported) unless the module is allowed explicitly
        assert main(["run", str(p), "--out", str(out), "--no-report", "--no-progress"]) == 2
        assert "--allow-plugin plugin_router" in capsys.readouterr().err
        assert "plugin_router" not in sys.modules
        assert main(["run", str(p), "--out", str(out), "--format", "csv", "--no-report", "--no-progress",
                     "--allow-plugin", "plugin_router"]) == 0
    finally:
        sys.path.remove(str(tmp_path))
    req = pd.read_csv(out / "requests.csv")
    assert set(req["decode_instance"]) == {"D0.2"}


def test_workload_stats_command(tmp_path, capsys):
    from pdsim.specs.catalog import traces_dir

    html = tmp_path / "w.html"
    assert main(["workload", "stats", str(traces_dir() / "mooncake_fast25_synthetic_trace.jsonl"), "--html", str(html)]) == 0
    out = capsys.readouterr().out
    assert "3,993" in out and "prefix reuse" in out and html.stat().st_size > 1000
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 5}\n')
    assert main(["workload", "stats", str(bad)]) == 2
    assert "line 1: output_length: missing" in capsys.readouterr().err


def test_sweep_and_compare_commands(tmp_path, capsys):
    from pdsim.specs.catalog import workloads_dir

    out = tmp_path / "sw"
    assert main(["sweep", str(workloads_dir() / "sweeps" / "llama8b-a800.yaml"), "--out", str(out), "--workers", "1"]) == 0
    assert "8 configurations" in capsys.readouterr().out and (out / "report.html").is_file()
    assert main(["compare", "llama8b-a800-colocated", "llama8b-a800-1p1d", "--set", "workload.num_requests=50",
                 "--out", str(tmp_path / "c")]) == 0
    text = capsys.readouterr().out
    assert "llama8b-a800-colocated" in text and "llama8b-a800-1p1d" in text
