"""Resume: a killed sweep continues where it stopped and recomputes nothing finished."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
import yaml

from pdsim.explore import run_sweep

from builders import scenario_dict

AXES = [{"field": "cluster.colocated.engine.chunked_prefill_size", "values": [256, 512, 1024, 2048]},
        {"field": "workload.rate", "values": [4.0, 8.0, 16.0]}]


def write_sweep(tmp_path, n_requests: int = 40, axes=None, **extra) -> str:
    base = scenario_dict("colocated")
    base["workload"]["num_requests"] = n_requests
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    p = tmp_path / "sweep.yaml"
    p.write_text(yaml.safe_dump({"name": "t", "base": "base.yaml", "axes": axes or AXES, **extra}))
    return str(p)


def rows(df):
    return df.drop(columns=["eval_wall_s"]).reset_index(drop=True)


def cache_state(out) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in (out / "cache").glob("*.json")}


def test_killed_run_resumes_without_recomputing_finished_configurations(tmp_path):
    p = write_sweep(tmp_path, n_requests=150)
    out = tmp_path / "o"
    code = f"from pdsim.explore import run_sweep; run_sweep({p!r}, {str(out)!r}, workers=1, progress=False)"
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, start_new_session=True)
    try:
        deadline = time.time() + 60
        while time.time() < deadline and len(cache_state(out) if (out / "cache").is_dir() else {}) < 3:
            assert proc.poll() is None, "the sweep finished before it could be killed"
            time.sleep(0.01)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # a hard kill: no cleanup, no outputs written
        proc.wait()
    before = cache_state(out)
    assert 3 <= len(before) < 12 and not (out / "results.csv").exists()

    resumed = run_sweep(p, out, workers=2, progress=False)
    assert resumed.attrs["cached"] == len(before)
    assert resumed.attrs["computed"] == 12 - len(before)
    after = cache_state(out)
    assert all(after[k] == v for k, v in before.items())  # finished ones were not rewritten
    assert len(after) == 12

    fresh = run_sweep(p, tmp_path / "fresh", workers=1, progress=False)
    pd.testing.assert_frame_equal(rows(resumed), rows(fresh))


def test_rerun_reads_everything_back_and_no_resume_recomputes(tmp_path):
    p = write_sweep(tmp_path)
    out = tmp_path / "o"
    first = run_sweep(p, out, workers=1, progress=False)
    assert first.attrs["computed"] == 12
    again = run_sweep(p, out, workers=1, progress=False)
    assert again.attrs["computed"] == 0 and again.attrs["cached"] == 12
    pd.testing.assert_frame_equal(first, again)  # timings too: read back, not recomputed
    # a lost and a corrupt cache file (e.g. a disk filled mid-write) are recomputed
    files = sorted((out / "cache").glob("*.json"))
    files[0].unlink()
    files[1].write_text("{not json")
    with pytest.warns(UserWarning, match=rf"sweep cache {files[1]}: not valid JSON"):
        third = run_sweep(p, out, workers=1, progress=False)
    assert third.attrs["computed"] == 2 and third.attrs["cached"] == 10
    assert len(third.attrs["cache_warnings"]) == 1  # the missing file is not a problem, the torn one is
    pd.testing.assert_frame_equal(rows(first), rows(third))
    forced = run_sweep(p, out, workers=1, progress=False, resume=False)
    assert forced.attrs["computed"] == 12


def test_cache_is_keyed_by_scenario_and_evaluation(tmp_path):
    out = tmp_path / "o"
    run_sweep(write_sweep(tmp_path), out, workers=1, progress=False)
    # a grown sweep computes only its new configurations
    grown = [AXES[0], {"field": "workload.rate", "values": [4.0, 8.0, 16.0, 32.0]}]
    df = run_sweep(write_sweep(tmp_path, axes=grown), out, workers=1, progress=False)
    assert df.attrs["computed"] == 4 and df.attrs["cached"] == 12
    # another SLO is another scenario: everything is recomputed
    df = run_sweep(write_sweep(tmp_path, slo={"ttft_ms": 100, "tpot_ms": 50}), out, workers=1, progress=False)
    assert df.attrs["computed"] == 12
    # another way of evaluating (max_rate) does not reuse plain simulations
    one = [{"field": "cluster.colocated.engine.chunked_prefill_size", "values": [2048]}]
    search = {"mode": "max_rate", "low": 1.0, "high": 400.0, "tolerance": 0.5}
    df = run_sweep(write_sweep(tmp_path, axes=one, search=search), out, workers=1, progress=False)
    assert df.attrs["computed"] == 1


def test_editing_a_file_the_scenario_names_invalidates_its_cache(tmp_path):
    from pdsim.specs.catalog import hardware_dir

    hw = tmp_path / "my-gpu.yaml"
    hw.write_text((hardware_dir() / "h100.yaml").read_text())
    base = scenario_dict("colocated", hardware="my-gpu.yaml")
    base["workload"]["num_requests"] = 20
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    p = tmp_path / "sweep.yaml"
    p.write_text(yaml.safe_dump({"base": "base.yaml", "axes": [AXES[1]]}))
    out = tmp_path / "o"
    assert run_sweep(p, out, workers=1, progress=False).attrs["computed"] == 3
    assert run_sweep(p, out, workers=1, progress=False).attrs["computed"] == 0
    hw.write_text(hw.read_text() + "\n# recalibrated\n")
    assert run_sweep(p, out, workers=1, progress=False).attrs["computed"] == 3
