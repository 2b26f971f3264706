"""Recordings of the same requests (pdsim/validate/repeats.py): the engine's own range beside the error.

The 1P1D knee was recorded three times with the same 130 requests on the zen1 host
(cpu-vllm-zen1-pd-knee 11:5x UTC, -zen1b-pd-knee 17:32, -zen1d-pd-knee 00:30 the next day): the
engine's mean TTFT 3,169 / 2,476 / 3,856 ms, p90 6,702 / 4,977 / 9,678 ms, each run's profile
re-measured on the host around it.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from pdsim.validate.case import run_case
from pdsim.validate.repeats import Requests, groups, with_repeats
from pdsim.workload.table import RequestTable

ROOT = Path(__file__).resolve().parent.parent
PD = [ROOT / "validation" / f"cpu-vllm-{h}-pd-knee" for h in ("zen1", "zen1b", "zen1d")]


def _req(send, inp, out, mode="send_times", host="zen1"):
    return Requests.of(RequestTable(np.asarray(send, float), np.asarray(inp), np.asarray(out)), mode, host)


def test_repeats_are_the_same_requests_sent_at_the_same_times():
    a = _req([0.0, 1.0, 2.5], [100, 200, 300], [10, 20, 30])
    jitter = _req([5.0, 6.004, 7.49], [200, 100, 300], [20, 10, 30])  # starts later, two sends swapped
    faster = _req([0.0, 0.7, 1.2], [100, 200, 300], [10, 20, 30])  # another load of the same workload
    other = _req([0.0, 1.0, 2.5], [100, 200, 301], [10, 20, 30])
    closed = _req([0.0, 0.0, 0.0], [100, 200, 300], [10, 20, 30], "closed_loop")
    elsewhere = _req([0.0, 1.0, 2.5], [100, 200, 300], [10, 20, 30], host="another")
    unnamed = _req([0.0, 1.0, 2.5], [100, 200, 300], [10, 20, 30], host="")
    assert groups([a, jitter, faster, other, closed, None, elsewhere, unnamed]) == [[0, 1]]
    assert not unnamed.same(_req([0.0, 1.0, 2.5], [100, 200, 300], [10, 20, 30], host=""))
    assert not a.same(closed) and _req([0, 0, 0], [1, 2, 3], [1, 1, 1], "closed_loop").same(
        _req([0, 9, 9], [3, 2, 1], [1, 1, 1], "closed_loop"))


def test_the_1p1d_knee_three_times_the_engine_moves_more_than_pdsim():
    """The three recordings are found to be repeats; the real range over them is each row's, and
    pdsim's mean TTFT (each with its own profile) lies inside the engine's own range in all three."""
    results = with_repeats([run_case(p) for p in PD])
    names = [r.name for r in results]
    for r in results:
        assert sorted(r.repeats) == sorted(n for n in names if n != r.name)
        row = {x.metric: x for x in r.rows}["mean_ttft_ms"]
        reals = [{x.metric: x for x in q.rows}["mean_ttft_ms"].real for q in results]
        assert (row.repeat_low, row.repeat_high) == (min(reals), max(reals))
        assert row.in_repeats
    spread = (max(reals) - min(reals)) / np.mean(reals)
    assert spread > 0.4  # the engine's own range on identical input: wider than ±20% around its mean


def test_a_host_that_is_not_a_label_is_named(tmp_path, capsys):
    import shutil

    import yaml

    from pdsim.cli import main

    dst = tmp_path / "case"
    shutil.copytree(PD[2], dst)
    c = yaml.safe_load((dst / "case.yaml").read_text())
    c["scenario"] = str(ROOT / "workloads" / "scenarios" / "cpu-vllm-tiny-llama-1p1d.yaml")
    c["host"] = ["zen1"]
    (dst / "case.yaml").write_text(yaml.safe_dump(c))
    assert main(["validate", str(dst)]) == 2
    err = capsys.readouterr().err
    assert "host" in err and "label" in err and "internal failure" not in err


def test_the_same_requests_through_another_engine_setting_are_not_a_repeat():
    """hf-cb-h200-chunk512 sends the knee's 46 requests at the same times with the step's token
    budget cut from 2048 to 512: a what-if, not the engine's run-to-run spread. The knee's repeat
    on the second machine start is one."""
    res = [run_case(ROOT / "validation" / f"hf-cb-h200-{c}") for c in ("knee", "knee-repeat", "chunk512")]
    assert groups([r.requests_of for r in res]) == [[0, 1]]
    table = RequestTable(np.asarray([0.0, 1.0]), np.asarray([5, 6]), np.asarray([1, 1]))
    a = Requests.of(table, "send_times", "h", ("s.yaml", ()))
    b = Requests.of(table, "send_times", "h", ("s.yaml", ("cluster.colocated.0.engine.chunked_prefill_size=512",)))
    assert a.same(Requests.of(table, "send_times", "h", ("s.yaml", ()))) and not a.same(b)
