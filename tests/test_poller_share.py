"""calibration/microbench/poller_share.py times its job on one thread, in a child whose BLAS is
limited before numpy loads: the job of 2026-11-27 ran in the script's own process, where numpy had
started a second OpenBLAS thread, unpinned, before the limit was set, so a busy loop on the *other*
core cost it 7.5-11.3x on the Intel host of 2026-11-28 (0.84-0.87x on one thread), and every figure
it gave was inflated (its docstring)."""
from __future__ import annotations

import os

import pytest
from builders import load_script

from pdsim.specs import catalog

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or not os.path.isdir("/proc/self/task"),
                                reason="Linux only (sched_setaffinity, /proc)")


def _module():
    return load_script(catalog.calibration_dir().parent / "calibration" / "microbench" / "poller_share.py")


def test_the_job_runs_on_one_thread_on_its_core():
    ps = _module()
    core = min(os.sched_getaffinity(0))
    assert ps.job(core, reps=2, n=64) > 0.0  # the child reported one thread (else RuntimeError)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="a BLAS starts no second thread on one CPU")
def test_a_job_on_more_threads_is_refused_not_timed(monkeypatch, capsys):
    ps = _module()
    monkeypatch.setattr(ps, "ONE_THREAD", {"OPENBLAS_NUM_THREADS": "2", "OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"})
    # numpy loaded before the pinning, as the old job did (pinned first, OpenBLAS counts one CPU)
    pin = "os.sched_setaffinity(0, {%(core)d})\n"
    monkeypatch.setattr(ps, "JOB", ps.JOB.replace(pin, "").replace("import numpy as np\n", "import numpy as np\n" + pin))
    with pytest.raises(RuntimeError, match="ran 2 threads, expected 1"):
        ps.job(min(os.sched_getaffinity(0)), reps=2, n=64)
    # the script says so in one line and exits 2, with nothing timed or written
    with pytest.raises(SystemExit) as ex:
        ps.main(["--core", str(min(os.sched_getaffinity(0))), "--repeats", "1"])
    assert ex.value.code == 2
    err = capsys.readouterr().err
    assert "ran 2 threads, expected 1" in err and "Traceback" not in err


def test_the_engines_arrangement_needs_its_own_session_and_another_core():
    ps = _module()
    with pytest.raises(ValueError, match="another core and a session of its own"):
        ps.beside("yield+busy", False, 0, 1, other=1)
    with pytest.raises(ValueError, match="another core and a session of its own"):
        ps.beside("yield+busy", True, 0, 1, other=None)
