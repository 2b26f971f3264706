"""Mixed prefill+decode steps of the real CPU engine priced through the step contract
(pdsim calibrate report, section mixed)."""
from __future__ import annotations

import math

from pdsim.calibrate.mixed_report import _cost, comparison, mixed_report
from pdsim.calibrate.data import data_dir

HEAD = ("hardware,kind,batch,context,chunk_tokens,measured_ms,spread_lo_ms,spread_hi_ms,samples,request_path_ms,"
        "cpu,engine,date,pinning,source\n")


def test_rows_are_priced_with_the_step_contract(tmp_path):
    f = tmp_path / "mixed.csv"
    prov = "AMD EPYC,vLLM 0.32.0 CPU,2026-11-26,worker core 0,measured"
    f.write_text(HEAD + f"cpu-epyc-2c,mixed,4,300,256,30.0,28,33,9,,{prov}\n"
                        f"cpu-epyc-2c,decode,4,300,0,10.0,9,11,9,,{prov}\n"
                        f"cpu-epyc-2c,prefill,0,0,256,20.0,19,22,3,9.0,{prov}\n")
    df = comparison(f)
    cost = _cost("cpu-epyc-2c", data_dir().parent.parent)
    want = [cost.step_time(256, 256 * 256 / 2, 1, 4, 1200.0), cost.step_time(0, 0.0, 0, 4, 1200.0),
            cost.step_time(256, 256 * 256 / 2, 1, 0, 0.0)]
    assert all(math.isclose(a, b * 1e3) for a, b in zip(df["priced_ms"], want))
    assert math.isclose(df["error"][0], (df["priced_ms"][0] - 30.0) / 30.0)
    text = mixed_report(f)
    assert "B=4 decodes + 256-token chunk" in text and "measured +20.00 ms" in text  # mixed - decode
    assert "worker core 0" in text


def test_missing_file_is_said():
    assert "no cpu_mixed_steps.csv" in mixed_report("/nonexistent/x.csv")


def test_cli_report_shows_the_committed_mixed_rows(capsys):
    from pdsim.cli import main

    assert main(["calibrate", "report", "--section", "mixed"]) == 0
    out = capsys.readouterr().out
    assert "== mixed steps (cpu_mixed_steps.csv)" in out and "chunk's increment" in out
    assert "mixed   B=" in out and "prefill " in out and "decode  B=" in out
