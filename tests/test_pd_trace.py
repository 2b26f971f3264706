"""The 1P1D trace summary (validation/cpu-vllm-pd/pd_trace.py) on the committed traced recording:
every prompt P prefilled is found again as D's tail step, after P's step ended."""
from __future__ import annotations

import pytest

from builders import REPO, load_script

TRACE = REPO / "validation/cpu-vllm-calibration/here/step-traces/pd-light"


def _module(name: str = "pd_trace"):
    """validation/cpu-vllm-pd/<name>.py as a module (a script, not part of the package)."""
    return load_script(f"validation/cpu-vllm-pd/{name}.py")


def test_the_traced_1p1d_run_adds_up():
    out = _module().analyse(TRACE, "light", str(REPO / "validation/cpu-vllm-calibration/here/cpu-epyc-2c.yaml"))
    assert out["matched"] == "40 of 40"  # 40 requests, each prefilled once by P, its tail once by D
    assert out["handoff_gap_ms"]["p10"] > 0  # D's step starts after P's ended
    assert out["p_host_ms_around_worker"]["p10"] >= 0  # the worker's calls lie inside P's steps
    assert 0 < out["worker_busy_share"]["P"] < out["worker_busy_share"]["D"] < 1
    procs = out["host"]["placement"]
    assert any(k.startswith("P:VLLM::Worker") and v["affinity"] == [0] for k, v in procs.items())
    assert any(k.startswith("D:VLLM::Worker") and v["affinity"] == [1] for k, v in procs.items())


def test_a_missing_or_malformed_trace_gets_one_line_and_exit_2(tmp_path):
    import subprocess
    import sys

    (tmp_path / "t.jsonl.123").write_text("garbage{\n")
    for script, args in (("validation/cpu-vllm-pd/pd_trace.py", ["--trace", str(tmp_path)]),  # no host-light.json
                         ("validation/cpu-vllm/step_compare.py", ["--trace", str(tmp_path / "t.jsonl")])):
        p = subprocess.run([sys.executable, str(REPO / script), *args], capture_output=True, text=True, cwd=REPO)
        assert p.returncode == 2, (script, p.stderr[-300:])
        assert p.stderr.startswith("error: ") and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr


def test_a_trace_row_missing_a_field_is_refused_naming_file_line_and_field(tmp_path, monkeypatch, capsys):
    """A cut or hand-edited row (here the step's end) used to crash with a KeyError deep in the
    summary; now: one line naming the file, the line and the field, exit 2."""
    import gzip
    import json
    import sys

    mod = _module()

    def run() -> str:
        monkeypatch.setattr(sys, "argv", ["pd_trace.py", "--trace", str(tmp_path)])
        with pytest.raises(SystemExit) as done:
            mod.main()
        assert done.value.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err
        return err

    for name in ("p", "d"):  # copy the committed traces, then cut one field from a D step row
        for f in sorted(TRACE.glob(f"{name}.*.gz")):
            (tmp_path / f.name).write_bytes(f.read_bytes())
    (tmp_path / "host-light.json").write_text((TRACE / "host-light.json").read_text())
    victim = sorted(tmp_path.glob("d.*.gz"))[0]
    lines = gzip.decompress(victim.read_bytes()).decode().splitlines()
    k = next(i for i, ln in enumerate(lines) if json.loads(ln).get("kind") == "step")
    row = json.loads(lines[k])
    del row["t_end"]
    lines[k] = json.dumps(row)
    victim.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    assert run() == f"error: {victim}:{k + 1}: a 'step' row without the field 't_end'\n"

    # the host file's fields likewise (here the observed placement)
    host = json.loads((TRACE / "host-light.json").read_text())
    del host["placement"]
    (tmp_path / "host-light.json").write_text(json.dumps(host))
    assert run().startswith(f"error: {tmp_path / 'host-light.json'}: no field 'placement'")


def test_the_handoff_segments_add_up_to_the_ttft():
    """handoff_trace.py (issue 24 item 5): each request's TTFT split into the way in, P's step, the
    hand-off, D's tail step and the way out; the split of in / out is pinned within the range of
    clock offsets that keeps both >= 0."""
    case = REPO / "validation/cpu-vllm-here-pd-traced-light"
    out = _module("handoff_trace").real_segments(TRACE, "light", case / "real" / "bench.json")
    assert out["matched"] == "40 of 40"
    assert 0 <= out["clock_offset_range_ms"] < 10
    parts = sum(out[k]["mean"] for k in ("in", "p_step", "handoff", "d_tail", "out"))
    assert parts == pytest.approx(out["ttft"]["mean"], abs=0.3)  # rounded to 0.1 ms each
    assert out["handoff_d_idle"]["n"] + out["handoff_d_busy"]["n"] == 40
    # the midpoint of the feasible offsets: the shortest way in and the shortest way out are each
    # half the range
    half = out["clock_offset_range_ms"] / 2
    assert out["in"]["min"] == pytest.approx(half, abs=0.11) and out["out"]["min"] == pytest.approx(half, abs=0.11)


def test_handoff_trace_refuses_a_missing_trace_in_one_line(tmp_path):
    import subprocess
    import sys

    p = subprocess.run([sys.executable, str(REPO / "validation/cpu-vllm-pd/handoff_trace.py"), "--case",
                        str(REPO / "validation/cpu-vllm-here-pd-traced-light"), "--trace", str(tmp_path)],
                       capture_output=True, text=True, cwd=REPO)
    assert p.returncode == 2, p.stderr[-300:]
    assert p.stderr.startswith("error: ") and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr


def test_what_p_loses_beside_d_follows_ds_step_count():
    """zen1b knee (2026-11-27): P's prefills lose ~6 ms per D step beside them, and that fits P's
    step times better than a share of D's compute (docs: validation/README.md, zen1c section)."""
    zen1b = REPO / "validation/cpu-vllm-calibration/zen1b"
    fit = _module().analyse(zen1b / "step-traces/pd-knee", "knee", str(zen1b / "cpu-epyc-2c.yaml"))["p_time_lost_to_d"]
    assert fit["n"] == 116
    assert 5.0 < fit["per_d_step_ms"] < 7.5
    assert fit["r2_d_steps"] > fit["r2_d_busy"] + 0.05
    few = _module().p_loss_fit([])
    assert few == {"n": 0}  # too few steps to fit: said, not a division by zero
