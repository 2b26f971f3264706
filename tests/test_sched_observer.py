"""calibration/microbench/sched_observer.py reads the kernel's scheduler state of one core (debugfs
``sched/debug``) and reports a process's share of it: how P's starved prefills of the Intel host's
1P1D knee were found to be EEVDF eligibility, not group weight (validation/README.md, 'When P's
core goes to D: eligibility, not weight'). The excerpt in tests/data is cpu#0 of one snapshot of
that run (kernel 6.18, 2026-11-28), sleeping tasks left out."""
from __future__ import annotations

from pathlib import Path

import pytest
from builders import load_script

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOT = ROOT / "tests" / "data" / "sched_debug_cpu0.txt"




def test_a_snapshot_gives_each_groups_weight_runnable_count_and_the_running_task():
    st = load_script("calibration/microbench/sched_observer.py").parse_core(SNAPSHOT.read_text(), 0)
    assert st["curr"] == 7151  # D's engine core ran while P starved
    assert st["avg_vruntime"] == pytest.approx(29077307.491214)
    p, d = st["groups"]["/autogroup-1223"], st["groups"]["/autogroup-1224"]
    assert p["weight"] == 1.0 and p["runnable"] == 15  # P: its worker, engine core, 13 gloo threads
    assert d["weight"] == pytest.approx(507919 / 1048576) and d["runnable"] == 1
    # P's group entity is ahead of the root's average (not eligible), D's behind it (eligible)
    assert st["avg_vruntime"] - p["vruntime"] == pytest.approx(-9.075804, abs=1e-6)
    assert st["avg_vruntime"] - d["vruntime"] > 10
    state, name, sum_exec, eligible, group = st["tasks"][7058]
    assert (state, name, group, eligible) == ("R", "VLLM::Worker", "/autogroup-1223", False)
    assert sum_exec == pytest.approx(26959.931865)
    assert st["tasks"][7151][0] == ">R"  # the running task is marked


def test_a_dump_without_the_core_is_named():
    with pytest.raises(ValueError, match="no cpu#3"):
        load_script("calibration/microbench/sched_observer.py").parse_core(SNAPSHOT.read_text(), 3)


def _state(curr: int, worker_ms: float, p_lag: float) -> dict:
    return {"curr": curr, "avg_vruntime": 100.0,
            "groups": {"/ag-P": {"weight": 0.96, "runnable": 15, "vruntime": 100.0 - p_lag},
                       "/ag-D": {"weight": 0.5, "runnable": 1, "vruntime": 90.0}},
            "tasks": {1: ("R", "VLLM::Worker", worker_ms, True, "/ag-P"), 2: ("R", "VLLM::EngineCor", 0.0, True, "/ag-D")}}


def test_the_share_is_cpu_over_wall_between_snapshots_inside_the_windows():
    """Four snapshots 10 ms apart: the worker gains 9, 0, 1 ms; the last pair lies outside the
    window. Shares 0.9 and 0 (one starved, one fine), the state at the pair's end described."""
    tool = load_script("calibration/microbench/sched_observer.py")
    states = [(0.00, _state(1, 0.0, 2.0)), (0.01, _state(1, 9.0, 1.0)), (0.02, _state(2, 9.0, -6.0)),
              (0.03, _state(1, 10.0, 1.0))]
    rep = tool.share_report(states, [(0.0, 0.025)], 1, {"/ag-P": "P", "/ag-D": "D"}, {1: "P", 2: "D"})
    assert rep["pairs"] == 2 and rep["share_mean"] == pytest.approx(0.45)
    assert rep["starved_fraction"] == 0.5
    assert rep["starved"]["running"] == {"D:VLLM::EngineCor": 1.0}
    assert rep["starved"]["groups"]["P"]["lag_ms"] == -6.0 and rep["fine"]["groups"]["P"]["lag_ms"] == 1.0
    with pytest.raises(ValueError, match="no two snapshots of pid 9"):
        tool.share_report(states, [(0.0, 0.025)], 9, {}, {})


def test_bad_arguments_are_refused_in_one_line(capsys, tmp_path):
    tool = load_script("calibration/microbench/sched_observer.py")
    with pytest.raises(SystemExit) as e:
        tool.main(["record", "--out", str(tmp_path / "r.gz"), "--core", "0", "--observer-core", "0"])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        tool.main(["analyse", str(tmp_path / "missing.json.gz"), "--trace", str(tmp_path)])
    assert e.value.code == 2 and "missing.json.gz" in capsys.readouterr().err
