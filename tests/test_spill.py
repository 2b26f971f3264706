"""Logs spilled to disk (columns.SpilledColumns) read back bit for bit, and every metric read
from them a part at a time equals the one read from the same log in memory: decode-step ends
(hence token times and ITLs), the summary, the request and timeline files, the run facts the
verdicts are built from, the report's figures."""
from __future__ import annotations

import json
import os
import pickle

import numpy as np
import pandas as pd
import pytest

import pdsim
from pdsim.metrics import run_facts as rf
from pdsim.report import figures
from pdsim.sim import columns, record
from pdsim.sim.columns import ColumnLog, SpilledColumns


def _fill(log: ColumnLog, rows: int, seed: int = 0) -> list[list]:
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.random(rows)).tolist()  # step starts as the engine logs them (Python floats)
    d = (rng.random(rows) * 1e-2).tolist()
    k = rng.integers(0, 1000, rows).tolist()
    for x in zip(t, d, k):
        if len(log.lists[0]) >= 64:
            log.flush()
        for col, v in zip(log.lists, x):
            col.append(v)
    return [t, d, k]


def test_spilled_log_reads_back_bit_for_bit(tmp_path, monkeypatch):
    monkeypatch.setenv("PDSIM_SPILL_DIR", str(tmp_path))
    names, dtypes = ("time_s", "step_s", "kv_used"), (np.float64, np.float64, np.int32)
    kept, spilled = ColumnLog(names, dtypes, spill_rows=1 << 30), ColumnLog(names, dtypes, spill_rows=100)
    rows = _fill(kept, 1000)
    _fill(spilled, 1000)
    assert spilled.last(0) == rows[0][-1] and spilled.last(2) == rows[2][-1]
    mem, disk = kept.columns(), spilled.columns()
    assert isinstance(mem, dict) and isinstance(disk, SpilledColumns) and disk.rows == 1000
    assert list(disk) == list(names) and len(list(tmp_path.iterdir())) == 1
    for c, dt in zip(names, dtypes):
        assert disk[c].dtype == dt and disk[c].tobytes() == mem[c].tobytes()
        assert disk.part(c, 123, 457).tobytes() == mem[c][123:457].tobytes()
    # start times exactly as logged: no sum is re-taken on read
    assert disk["time_s"].tolist() == rows[0]
    back = pickle.loads(pickle.dumps(disk))  # worker processes and saved results get plain arrays
    assert isinstance(back, dict) and all(back[c].tobytes() == mem[c].tobytes() for c in names)
    del disk, back, spilled  # the log keeps its mapping
    import gc

    gc.collect()
    assert not list(tmp_path.iterdir())  # the folder goes with the mapping


def _scenario():
    return pdsim.load_scenario("dsv3-h800-p4d6", [
        "workload.kind=synthetic", "workload.num_requests=250", "workload.rate=3.4",
        "workload.input.dist=lognormal", "workload.input.mean=4000", "workload.input.std=3000",
        "workload.input.max=32000", "workload.output.dist=lognormal", "workload.output.mean=340",
        "workload.output.std=250", "workload.output.max=4000"])


@pytest.fixture(scope="module")
def pair():
    """The same run with its logs in memory and spilled (parts of 997 rows where read in parts)."""
    sc = _scenario()
    mp = pytest.MonkeyPatch()
    try:
        mem = pdsim.simulate(sc)
        mp.setattr(columns, "SPILL_ROWS", 500)
        mp.setattr(record, "PART_ROWS", 997)
        mp.setattr(rf, "PART_ROWS", 997)
        mp.setattr(figures, "PART_ROWS", 997)
        disk = pdsim.simulate(sc)
        yield mem, disk, mp
    finally:
        mp.undo()


def test_chunked_metrics_equal_unchunked(pair, tmp_path):
    mem, disk, _mp = pair
    assert all(isinstance(s, dict) for s in mem.record.steps)
    assert any(isinstance(s, SpilledColumns) for s in disk.record.steps)
    assert isinstance(disk.record.link_usage, SpilledColumns)  # the timeline's link rows read a part at a time
    for a, b in zip(mem.record.tokens.step_end, disk.record.tokens.step_end):
        assert a.tobytes() == b.tobytes()  # decode-step ends: token times bit for bit
    sa, sb = mem.summary(), disk.summary()
    sa.pop("wall_s"), sb.pop("wall_s")
    assert json.dumps(sa, sort_keys=True, default=str) == json.dumps(sb, sort_keys=True, default=str)
    assert mem.itl_hist.expand().tobytes() == disk.itl_hist.expand().tobytes()
    pd.testing.assert_frame_equal(mem.requests, disk.requests)
    from pdsim.report.outputs import write_run_outputs

    write_run_outputs(mem, tmp_path / "a", report=False)
    write_run_outputs(disk, tmp_path / "b", report=False)
    for f in ("requests.parquet", "timeline.parquet"):
        pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "a" / f), pd.read_parquet(tmp_path / "b" / f))


def test_chunked_facts_and_figures_equal_unchunked(pair):
    mem, disk, _mp = pair
    fa, fb = rf.run_facts(mem), rf.run_facts(disk)
    for x, y in zip(fa.instances, fb.instances):
        # exact counts and percentile; sums taken part by part equal up to summation order
        assert (x.steps, x.prefill_tokens, x.decode_tokens, x.kv_p95) == (y.steps, y.prefill_tokens, y.decode_tokens,
                                                                          y.kv_p95)
        for k in ("util", "busy_s", "mean_batch", "mean_queue", "mean_step_s"):
            assert getattr(x, k) == pytest.approx(getattr(y, k), rel=1e-12), k
    for fig in (figures.instance_timeline_figure, figures.throughput_timeline_figure):
        a, b = fig(mem), fig(disk)
        assert len(a.data) == len(b.data)
        for ta, tb in zip(a.data, b.data):
            np.testing.assert_array_equal(np.asarray(ta.x), np.asarray(tb.x))
            np.testing.assert_allclose(np.asarray(ta.y, dtype=float), np.asarray(tb.y, dtype=float), rtol=1e-12)


def test_a_terminated_run_leaves_no_spill_folder(tmp_path):
    """SIGTERM ends the CLI as an exit, so a log that spilled mid-run takes its folder with it
    (before, a killed run left /tmp/pdsim-log-* behind)."""
    import signal
    import subprocess
    import sys
    import time

    code = (
        "import time, numpy as np\n"
        "from pdsim.cli import _exit_on_sigterm\n"
        "from pdsim.sim.columns import ColumnLog\n"
        "_exit_on_sigterm()\n"
        "log = ColumnLog(('a',), (np.float64,), spill_rows=10)\n"
        "log.lists[0].extend(range(100)); log.flush()\n"
        "print('spilled', flush=True)\n"
        "time.sleep(60)\n"
    )
    env = dict(os.environ, PDSIM_SPILL_DIR=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout.readline().strip() == "spilled"
        assert len(list(tmp_path.glob("pdsim-log-*"))) == 1
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 128 + signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
    deadline = time.monotonic() + 5
    while list(tmp_path.glob("pdsim-log-*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not list(tmp_path.glob("pdsim-log-*"))
