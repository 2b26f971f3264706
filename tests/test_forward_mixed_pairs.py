"""The mixed-step lines of ``pdsim calibrate report --section forward`` set a mixed step beside the
pure decode and the chunk's pure prefill of the *same* session (review3: they took the median of
every session's graph rows of that shape, so run 5's mixed 2048-token step was set against run 3's
prefill, 63.92 ms, not its own 66.26 ms, on another machine; and a decode of another layer count
or model matched by prefix); and rows whose sizes their phase cannot price are named."""
from __future__ import annotations

import pandas as pd
import pytest

from pdsim.calibrate.forward_report import forward_comparison, forward_report
from pdsim.specs.errors import SpecError

GRAPH = "repo TorchLlama (gpu_forward.py), CUDA graph replay; command: "


def _row(phase, batch, tokens, context, us, run, layers=32, model="llama-3.1-8b"):
    return {"hardware": "h100", "model": model, "phase": phase, "batch": batch, "tokens": tokens,
            "context": context, "layers": layers, "us": us, "note": GRAPH + run, "source": "measured"}


def _line(text):
    return next(ln for ln in text.splitlines() if "mixed 32 x 2048 ctx + 512 chunk, 32 layers" in ln
                and ("saves" in ln or "no pure decode" in ln))


def test_a_mixed_step_is_set_beside_the_decode_and_prefill_of_its_own_session():
    rows = [_row("mixed", 32, 512, 2048, 24000.0, "run5"),
            _row("decode", 32, 32, 2048, 12000.0, "run5"), _row("prefill", 1, 512, 512, 18000.0, "run5"),
            # another session (another machine) of the same shapes, and a decode of another depth
            _row("decode", 32, 32, 2048, 9000.0, "run3"), _row("prefill", 1, 512, 512, 14000.0, "run3"),
            _row("decode", 32, 32, 2048, 1000.0, "run5", layers=2)]
    line = _line(forward_report(pd.DataFrame(rows)))
    assert "+ 12.00 ms measured" in line and "chunk alone 18.00 measured" in line
    assert "batching saves 6.00 ms measured" in line


def test_a_mixed_step_without_its_sessions_decode_says_so():
    rows = [_row("mixed", 32, 512, 2048, 24000.0, "run5"), _row("decode", 32, 32, 2048, 12000.0, "run3")]
    assert "no pure decode of the same batch and context in its session" in _line(forward_report(pd.DataFrame(rows)))


@pytest.mark.parametrize("phase, change, match", [
    ("mixed", {"batch": 0}, "line 2: batch: expected a whole number >= 1 for a mixed row, got 0"),
    ("mixed", {"tokens": -5}, "line 2: tokens: expected a whole number >= 1 for a mixed row"),
    ("mixed", {"context": -1}, "line 2: context: expected a whole number >= 0 for a mixed row"),
    ("mixed", {"batch": 2.5}, "line 2: batch: expected a whole number >= 1 for a mixed row, got 2.5"),
    ("decode", {"batch": 0}, "line 2: batch: expected a whole number >= 1 for a decode row"),
    ("prefill", {"tokens": 0}, "line 2: tokens: expected a whole number >= 1 for a prefill row"),
])
def test_a_row_whose_sizes_the_phase_cannot_price_names_its_line(phase, change, match):
    """A mixed row with no decodes or no chunk was priced as the other phase, a negative context
    or a fractional batch priced silently (truncated): each is bad data, named by line and field."""
    row = _row(phase, 8, 128, 2048, 12000.0, "run5")
    with pytest.raises(SpecError, match=match):
        forward_comparison(pd.DataFrame([{**row, **change}]))


def test_ingest_refuses_a_forward_row_the_report_cannot_price(tmp_path, ingest_session):
    """A session's mixed row with no decodes was appended to calibration/data/forward.csv, after
    which the forward report stopped at it for every row: ingest names it and writes nothing."""
    from pdsim.calibrate import data

    mod = ingest_session
    session, out = tmp_path / "s", tmp_path / "d"
    session.mkdir()
    out.mkdir()
    prov = {"fit": None, "software": "torch 2.11.0", "date": "2026-11-26"}
    good = {**_row("mixed", 8, 128, 2048, 12000.0, "run5"), **prov}
    pd.DataFrame([good, {**good, "batch": 0}])[data.columns("forward")].to_csv(session / "forward.csv", index=False)
    with pytest.raises(SystemExit, match="forward.csv: line 3: batch: expected a whole number >= 1 for a mixed row"):
        mod.ingest(session, out)
    assert not (out / "forward.csv").exists()
    pd.DataFrame([good])[data.columns("forward")].to_csv(session / "forward.csv", index=False)
    assert "forward.csv: 1 rows" in mod.ingest(session, out)[0]
