"""The benchmark driver's table and its ``--pdsim-run`` argument, from a small fake results dict (no timing)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import run_all  # noqa: E402
import run_memory  # noqa: E402


def _scale_row(n: int, fleet: int = 1, **extra) -> dict:
    return {"requests": n, "fleet": fleet, "gpus": 80 * fleet, "requests_per_s": 5000.0, "simulate_s": 2.0,
            "metrics_s": 0.5, "outputs_s": 0.5, "peak_mib": 300.0, "completed": n, "mean_ttft_ms": 100.0,
            "p99_itl_ms": 50.0, "engine_steps": 10 * n, **extra}


def _memory_row(kind: str, n: int, peak: int) -> dict:
    bound = run_memory.BOUNDS.get(n)
    return {"workload": kind, "requests": n, "command": run_memory.command_text(kind, n), "peak_bytes": peak,
            "peak_mib": peak / 2**20, "bytes_per_request": peak / n, "wall_s": 1271.0, "cpu_s": 1200.0,
            "simulate_s": 1000.0, "engine_steps": 16_000_000, "completed": n, "dropped": 0, "sim_time_s": 3e5,
            "bound_bytes": bound, "within_bound": None if bound is None else peak < bound,
            "load_avg": {"start": 2.0, "end": 3.0}}


def _results(steps_baseline: int) -> dict:
    summary = {"median": 1.5, "min": 1.2, "max": 1.8, "n": 5}
    return {
        "date": "2026-11-26", "commit": "abc1234", "python": "3.11.7", "cores": 2, "machine": "x86_64",
        "quick": False, "load_avg": {"core": {"start": 1.0, "end": 4.5, "wall_s": 10.0}},
        "versus": {"date": "2026-11-26T20:00:00+00:00", "current": "abc1234", "baseline": "2504746",
                   "scenario": "dsv3-h800-p4d6", "rounds": 5, "machine": {"cores": 2},
                   "ratio_baseline_over_current": {k: summary for k in ("simulate_s", "wall_s", "cpu_s", "peak_mib")},
                   "simpy_events_per_s": {"median": 1.4e6, "min": 1.3e6, "max": 1.5e6, "n": 5},
                   "load_avg": {"median": 2.5, "min": 2.0, "max": 3.0, "n": 5},
                   "steps": {"current": 184_071, "baseline": steps_baseline}},
        "core": {"requests": 12031, "gpus": 80, "repeat": 5, "requests_per_s": 11000.0, "steps_per_s": 2e5,
                 "peak_mib": 250.0, "simpy_events_per_s": 1.45e6},
        "length": [_scale_row(12031), _scale_row(120310)],
        "fleet": [_scale_row(12031), _scale_row(48124, fleet=4)],
        "replicas": [_scale_row(144372, fleet=12, simulate_s=16.0), _scale_row(144372, fleet=12, simulate_s=9.0)],
        "sweep": [{"sweep": "s.yaml", "configurations": 120, "simulated": 100, "wall_s": 38.0},
                  {"sweep": "s.yaml", "configurations": 120, "simulated": 100, "wall_s": 22.0}],
        "pdsim_run_alongside": True,
        "pdsim_run": [_memory_row("A", 1_000_000, 1_400_000_000), _memory_row("B", 10_000_000, 12_500_000_000)],
    }


def test_table_opens_with_the_same_run_ratios_and_ends_with_the_memory_rows_and_their_bounds():
    text = run_all.table(_results(steps_baseline=193_022))
    assert text.index("Same-run comparison") < text.index("| `bench_core.py`") < text.index("Memory through")
    assert "`abc1234` against `2504746`" in text and "5 rounds" in text
    assert "| simulate wall time | 1.50x (1.20-1.80) |" in text
    assert "not like for like" in text and "the baseline took 193,022 engine steps, the current tree 184,071" in text
    assert "load average 1.0-4.5" in text
    assert "| 1,000,000 | A | 16.0M | 1,335 MiB (1.40 GB) | 1,400 B | under 1.5 GB | 21 min 11 s (16 min 40 s) | 20 min 0 s |" in text
    assert "| 10,000,000 | B |" in text and "| OVER 12 GB |" in text
    assert "all at once in the background" in text
    assert "load average 2.5 (2.0-3.0) on 2 cores" in text
    assert "read speed from the CPU time" not in text  # SimPy steady within 1.5x: no noise warning
    # the exact commands, with the request limit raised as the README shows
    assert "PDSIM_MAX_REQUESTS=10000000 nice -n 19 /usr/bin/time -v python -m pdsim run dsv3-h800-p4d6" in text
    assert "--set workload.rate=12" in text and "--set workload.rate=3.4" in text


def test_same_steps_read_as_like_for_like_and_no_memory_section_without_it():
    r = _results(steps_baseline=184_071)
    del r["pdsim_run"]
    text = run_all.table(r)
    assert "like for like" in text and "not like for like" not in text
    assert "Memory through" not in text
    r["versus"]["simpy_events_per_s"] = {"median": 2.4e5, "min": 2.3e5, "max": 7.1e5, "n": 5}
    assert "Bare SimPy's rate varied 3.1x between rounds" in run_all.table(r)


def test_a_requested_run_that_did_not_finish_is_named_not_dropped():
    r = _results(steps_baseline=184_071)
    r["pdsim_run_requested"] = [["A", 1_000_000], ["B", 10_000_000]]
    r["pdsim_run"] = r["pdsim_run"][:1]
    text = run_all.table(r)
    assert "| 1,000,000 | A |" in text and "| 10,000,000 |" not in text
    assert "not measured (the run did not finish): 10,000,000 (B)" in text
    assert "PDSIM_MAX_REQUESTS=10000000 nice -n 19" in text  # its command is still given


def test_pdsim_run_sizes_pick_the_readme_workloads_and_bad_input_is_one_line():
    assert run_memory.parse_runs("1000000,10000000") == [("A", 1_000_000), ("B", 10_000_000)]
    assert run_memory.parse_runs("b:2000, A:3_000") == [("B", 2000), ("A", 3000)]
    for bad, says in (("1e6", "expected a request count"), ("C:100", "unknown workload 'C'"), (",", "e.g.")):
        with pytest.raises(SystemExit, match=says) as e:
            run_memory.parse_runs(bad)
        assert "\n" not in str(e.value)
    words = run_memory.argv("A", 1000, "OUT")
    assert words[:2] == ["run", "dsv3-h800-p4d6"] and "workload.num_requests=1000" in words
    assert words[-2:] == ["--out", "OUT"] and "--no-verdict-check" in words


def test_a_stopped_run_renders_what_it_measured_and_names_the_rest():
    r = _results(steps_baseline=184_071)
    for k in ("fleet", "replicas", "sweep"):
        del r[k]
    text = run_all.table(r)
    assert "| `bench_core.py` |" in text and "Not measured: fleet, replicas, sweep (the run was stopped before them)" in text
    assert "Scaling plot" not in text
    del r["core"], r["length"]
    text = run_all.table(r)
    assert "Same-run comparison" in text and "Absolute figures: not measured" in text and "| 10,000,000 | B |" in text


def test_kept_memory_rows_say_where_they_come_from_and_bad_files_are_one_line(tmp_path):
    """--keep-pdsim-run: the hour-long 10M row is carried from an earlier results file with its date and
    commit, and the README says it was not re-measured in this run."""
    import json

    old = _results(193_022)
    old["load_avg"]["pdsim_run"] = {"start": 5.0, "end": 4.9, "wall_s": 3900.0}
    (tmp_path / "old.json").write_text(json.dumps(old))
    kept = run_all._kept_rows(tmp_path / "old.json")
    assert kept["pdsim_run"] == old["pdsim_run"]
    assert kept["pdsim_run_kept"]["date"] == "2026-11-26" and kept["pdsim_run_kept"]["commit"] == "abc1234"
    new = {k: v for k, v in _results(193_022).items() if not k.startswith("pdsim_run")}
    new.update(commit="def5678", date="2026-11-27", **kept)
    text = run_all.table(new)
    assert "not in this run: measured on 2026-11-26 at commit `abc1234` (`run_all.py` results in" in text
    assert "load average 5.0 at the start and 4.9 at the end" in text
    assert "| 10,000,000 | B |" in text
    (tmp_path / "none.json").write_text(json.dumps({"date": "x"}))
    for bad, why in ((tmp_path / "none.json", "no 'pdsim_run' rows"), (tmp_path / "missing.json", "cannot read")):
        with pytest.raises(SystemExit, match=why):
            run_all._kept_rows(bad)
