"""Bad overlap.csv rows (calibration/data, written by gpu_overlap.py and appended by
calibration/ingest_session.py) give a one-line SpecError naming the file, line and field, not a
pandas traceback (review3: an empty file raised EmptyDataError, a non-numeric time a TypeError
from the median, a non-numeric SM count dropped its row silently)."""
from __future__ import annotations

import pandas as pd
import pytest

from pdsim.calibrate.fit_overlap import overlap_factors, overlap_report
from pdsim.specs.errors import SpecError

ROW = {"hardware": "h100", "kernel": "gemm_fp8", "shape": "m=4096 k=7168 n=4096", "held_sms": 0, "beside": "none",
       "proxy_gbps": 0.0, "us": 180.0, "fit": None, "note": "x; command: a", "source": "measured",
       "software": "torch", "date": "2026-11-26"}


def _write(tmp_path, rows):
    path = tmp_path / "overlap.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


@pytest.mark.parametrize("change, match", [
    ({"us": "abc"}, "line 3: us: expected a finite time > 0 us, got 'abc'"),
    ({"us": -5.0}, "line 3: us: expected a finite time > 0 us"),
    ({"held_sms": "lots"}, "line 3: held_sms: expected a whole number of SMs >= 0"),
    ({"held_sms": 2.5}, "line 3: held_sms: expected a whole number of SMs >= 0"),
])
def test_a_bad_row_names_its_line_and_field(tmp_path, change, match):
    path = _write(tmp_path, [ROW, {**ROW, "held_sms": 24, **change}])
    with pytest.raises(SpecError, match=match) as e:
        overlap_factors(path)
    assert str(path) in str(e.value) and "\n" not in str(e.value)


def test_an_empty_file_or_a_missing_column_is_named(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(SpecError, match="empty.csv: not a CSV with a header row"):
        overlap_report(empty)
    path = _write(tmp_path, [{k: v for k, v in ROW.items() if k != "held_sms"}])
    with pytest.raises(SpecError, match="missing column 'held_sms'"):
        overlap_factors(path)


def test_good_rows_still_fit(tmp_path):
    rows = [ROW, {**ROW, "held_sms": 24, "us": 207.0}]
    f = overlap_factors(_write(tmp_path, rows))
    assert f["carveout"]["ratio"] == pytest.approx(207.0 / 180.0) and f["carveout"]["n"] == 1


def test_the_share_is_the_profiles_sm_count_not_a_silent_132(tmp_path):
    """k is relative to 24 / SMs: an H20's rows (78 SMs, its profile's gpu.sms) were read at
    H100's 132 when the first 50 notes named no count (the fallback); now the profile gives it
    and a note that contradicts it is named."""
    rows = [{**ROW, "hardware": "h20"}, {**ROW, "hardware": "h20", "held_sms": 24, "us": 207.0}]
    f = overlap_factors(_write(tmp_path, rows), hardware="h20")
    assert f["carveout"]["k"] == pytest.approx((207.0 / 180.0 - 1) / (24 / (78 - 24)))
    rows[1]["note"] = "132 SMs; proxy on 24 SMs; command: a"
    with pytest.raises(SpecError, match=r"h20: SM count 78 in its profile, \[132\] in the rows' notes"):
        overlap_factors(_write(tmp_path, rows), hardware="h20")


@pytest.mark.parametrize("change, match", [
    ({"held_sms": -24}, "line 2: held_sms: expected a whole number >= 0, got -24"),
    ({"held_sms": "x"}, "line 2: held_sms: expected a whole number >= 0, got 'x'"),
    ({"held_sms": 2.5}, "line 2: held_sms: expected a whole number >= 0, got 2.5"),
    ({"beside": None}, "line 2: beside: expected a name, got a blank"),
])
def test_ingest_refuses_an_overlap_row_that_names_no_point(tmp_path, change, match, ingest_session):
    """A session's overlap.csv row with a negative, fractional or non-numeric SM count, or nothing
    named beside the kernel, was appended to calibration/data, where the fit left it out silently
    (or, now, stops the report): ingest refuses it and writes nothing."""
    from pdsim.calibrate import data

    mod = ingest_session
    session, out = tmp_path / "s", tmp_path / "d"
    session.mkdir()
    out.mkdir()
    pd.DataFrame([{**ROW, **change}])[data.columns("overlap")].to_csv(session / "overlap.csv", index=False)
    with pytest.raises(SystemExit, match=match):
        mod.ingest(session, out)
    assert not (out / "overlap.csv").exists()


def test_rows_that_ingestion_annotated_stay_in_their_session(tmp_path):
    """Run 5's proxy rows had "; proxy relabelled ..." appended after the command at ingestion:
    the session key took it in, so those rows could not pair with the same run's kernels alone."""
    from pdsim.calibrate.fit_overlap import PROXY

    rows = [ROW, {**ROW, "held_sms": 24, "beside": PROXY, "us": 240.0,
                  "note": "x; command: a; proxy relabelled <kind>_w<warps> at ingestion"}]
    f = overlap_factors(_write(tmp_path, rows))
    assert f["beside"]["ratio"] == pytest.approx(240.0 / 180.0)
