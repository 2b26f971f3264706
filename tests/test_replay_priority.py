"""The replay client's SCHED_FIFO priority (pdsim/replay/priority.py): only its send/receive loop
runs at it, bad values are named, and a host that does not allow it says what to do.

Why: on the 2-core CPU validation host the client at equal priority read several steps' tokens
at once; the same workload, server and profile gave 15.9% of inter-token gaps at 0 s without it
and 0.0% with it, the engine's step times unchanged (batch-1 decode cycle 7.04 vs 6.86 ms mean;
validation/README.md, "The client's timestamps")."""
from __future__ import annotations

import os

import pytest

from pdsim.cli import main
from pdsim.replay import ReplayConfig
from pdsim.replay.priority import check_fifo, fifo


def _may_fifo() -> bool:
    try:
        with fifo(1):
            return True
    except PermissionError:
        return False


@pytest.mark.parametrize("bad", [0, 100, -3, 1.5, "10"])
def test_a_priority_outside_sched_fifo_range_is_named(bad):
    with pytest.raises(ValueError, match=r"fifo: a SCHED_FIFO priority is an integer in \[1, 99\]"):
        check_fifo(bad)
    with pytest.raises(ValueError, match="fifo:"):
        ReplayConfig("http://127.0.0.1:1", fifo=bad)


def test_none_leaves_the_thread_as_it_is():
    before = os.sched_getscheduler(0)
    with fifo(None):
        assert os.sched_getscheduler(0) == before
    ReplayConfig("http://127.0.0.1:1")  # the default needs no right


@pytest.mark.skipif(not _may_fifo(), reason="this process may not use SCHED_FIFO (not root, no CAP_SYS_NICE)")
def test_the_block_runs_at_fifo_and_the_thread_gets_its_policy_back():
    before = os.sched_getscheduler(0), os.sched_getparam(0).sched_priority
    with fifo(7):
        assert os.sched_getscheduler(0) == os.SCHED_FIFO and os.sched_getparam(0).sched_priority == 7
    assert (os.sched_getscheduler(0), os.sched_getparam(0).sched_priority) == before
    with pytest.raises(RuntimeError):  # also when the block fails
        with fifo(7):
            raise RuntimeError("boom")
    assert os.sched_getscheduler(0) == before[0]


def _replay_cli(tmp_path, capsys, prio: str) -> tuple[int, str]:
    """``pdsim replay`` of one request to a closed port with ``--fifo prio``: (exit status, stderr)."""
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 8, "output_length": 4}\n')
    rc = main(["replay", str(trace), "--endpoint", "http://127.0.0.1:9", "--out", str(tmp_path / "o"),
               "--fifo", prio])
    return rc, capsys.readouterr().err


def test_the_cli_names_the_flag(tmp_path, capsys):
    rc, err = _replay_cli(tmp_path, capsys, "0")
    assert rc == 2 and "--fifo" in err and "[1, 99]" in err


@pytest.mark.skipif(not _may_fifo(), reason="this process may not use SCHED_FIFO (not root, no CAP_SYS_NICE)")
def test_only_the_timed_send_receive_loop_runs_at_fifo(monkeypatch):
    """The prompts' preparation (text calibration, numpy prompt ids) and the prompts' block hashes
    after the run are CPU work, not reads: at SCHED_FIFO on the client's core they would hold off
    the server's processes there (and numpy's helper threads)."""
    import numpy as np

    from test_replay import FakeServer

    from pdsim.replay import client, replay, session
    from pdsim.workload import prefix_hashes
    from pdsim.workload.table import RequestTable

    seen = {}
    prepare, run, hashes = session._prepare, client.Replayer.run, prefix_hashes.block_hashes

    async def _prepare(*a, **k):
        seen["prepare"] = os.sched_getscheduler(0)
        return await prepare(*a, **k)

    async def _run(self, *a, **k):
        seen["run"] = os.sched_getscheduler(0)
        return await run(self, *a, **k)

    def _hashes(*a, **k):
        seen["hashes"] = os.sched_getscheduler(0)
        return hashes(*a, **k)

    monkeypatch.setattr(session, "_prepare", _prepare)
    monkeypatch.setattr(client.Replayer, "run", _run)
    monkeypatch.setattr(prefix_hashes, "block_hashes", _hashes)
    before = os.sched_getscheduler(0)
    table = RequestTable(np.arange(3) * 0.01, np.full(3, 8), np.full(3, 3), source="test")
    with FakeServer() as srv:
        rec = replay(table, ReplayConfig(srv.url, fifo=5), name="t")
    assert seen == {"prepare": before, "run": os.SCHED_FIFO, "hashes": before}
    assert os.sched_getscheduler(0) == before and rec.meta["client_sched"] == "SCHED_FIFO 5"
    # the host's autogroup setting goes with the recording (host.autogroup)
    from pdsim.specs.machine import sched_autogroup

    assert rec.meta["sched_autogroup"] == sched_autogroup()


def test_without_the_right_the_cli_names_the_flag_before_sending(tmp_path, capsys, monkeypatch):
    def refuse(*a):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "sched_setscheduler", refuse)
    rc, err = _replay_cli(tmp_path, capsys, "10")
    assert rc == 2 and "--fifo" in err and "CAP_SYS_NICE" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 2


def test_true_is_not_a_priority():
    with pytest.raises(ValueError, match="fifo:"):
        check_fifo(True)


HARNESS = {  # each harness with --client-fifo, and a --python that starts nothing if it got that far
    "here": ["validation/cpu-vllm/here.py", "--cases", "{tmp}/c", "--profile-dir", "{tmp}/p",
             "--python", "{tmp}/no-python", "--skip-remeasure"],
    "run_case": ["validation/cpu-vllm-pd/run_case.py", "--python", "{tmp}/no-python", "--model", "{tmp}/m",
                 "--prefix", "{tmp}/never"],
    "cpu_profile": ["calibration/microbench/cpu_profile.py", "overhead", "--out", "{tmp}/o",
                    "--endpoint", "http://127.0.0.1:9"],
}


@pytest.mark.parametrize("script", sorted(HARNESS))
def test_the_harness_scripts_name_a_bad_client_fifo_before_they_start(script, tmp_path):
    """here.py and run_case.py start servers and re-measure for minutes before their first replay:
    a bad --client-fifo (or no right to SCHED_FIFO) is named at once, not as a traceback then."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    argv = [a.format(tmp=tmp_path) for a in HARNESS[script]]
    p = subprocess.run([sys.executable, str(root / argv[0]), *argv[1:], "--client-fifo", "0"], cwd=root,
                       capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(root)})
    assert p.returncode == 2, p.stderr[-2000:]
    assert "--client-fifo" in p.stderr and "[1, 99]" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.parametrize("extra, named", [(["--requests", "0"], "--requests"),
                                          (["--requests", "40", "60", "80", "90"], "--requests"),
                                          (["--loads", "huge"], "--loads"),
                                          (["--token-budget", "0"], "--token-budget"),
                                          (["--max-num-seqs", "0"], "--max-num-seqs"),
                                          (["--max-num-seqs", "4", "--no-skip"], "re-measure first"),
                                          (["--mixed-chunk"], "vLLM's V1 scheduler always mixes"),
                                          (["--engine", "sglang", "--trace-steps", "x"], "vLLM's scheduler"),
                                          (["--engine", "sglang", "--mixed-chunk", "--no-skip"], "re-measure first")])
def test_here_names_bad_loads_and_counts_before_it_starts(extra, named, tmp_path):
    """here.py's loads (light, knee and, on request, overload at 1.3x the priced capacity) and their
    request counts are checked before any server starts: exit 2, the flag named, no traceback."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    argv = [a.format(tmp=tmp_path) for a in HARNESS["here"]]
    if "--no-skip" in extra:  # a what-if with the re-measurement
        argv, extra = [a for a in argv if a != "--skip-remeasure"], [e for e in extra if e != "--no-skip"]
    p = subprocess.run([sys.executable, str(root / argv[0]), *argv[1:], *extra], cwd=root,
                       capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(root)})
    assert p.returncode == 2, p.stderr[-2000:]
    assert named in p.stderr and "Traceback" not in p.stderr
    if named not in ("--token-budget", "--max-num-seqs", "re-measure first", "vLLM's V1 scheduler always mixes",
                     "vLLM's scheduler"):
        assert "overload" in p.stderr  # the loads it knows are named


@pytest.mark.parametrize("script", ["here", "run_case"])
@pytest.mark.parametrize("workload, says", [
    (None, "no such file"),
    ("kind: synthetic\nnum_requests: 4\ninput: {dist: fixed, value: 4000}\noutput: {dist: fixed, value: 200}\n",
     "request 0 has 4000 prompt + 200 output tokens, past the engine's --max-model-len 4096 (4 such request(s))"),
    ("kind: synthetic\nnum_requests: -3\n", "num_requests")])
def test_the_harness_scripts_name_a_bad_workload_before_they_start(script, workload, says, tmp_path):
    """here.py and run_case.py --workload FILE (record any workload, not only the scenario's): a
    file that is missing, malformed, or holds requests the engine's --max-model-len refuses is
    named at once (exit 2, the file and the first such request), not after minutes of start-up."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    path = tmp_path / "w.yaml"
    if workload is not None:
        path.write_text(workload)
    argv = [a.format(tmp=tmp_path) for a in HARNESS[script]]
    p = subprocess.run([sys.executable, str(root / argv[0]), *argv[1:], "--workload", str(path)], cwd=root,
                       capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(root)})
    assert p.returncode == 2, p.stderr[-2000:]
    assert "--workload" in p.stderr and says in p.stderr and "Traceback" not in p.stderr
    assert str(path) in p.stderr
