"""report.html (pdsim/report/figures.py, shared with the dashboard's figures): reports load one
plotly.min.js written next to them instead of inlining ~5 MB each; ``--standalone-report``
inlines it. File sizes measured; the pages are opened in the headless browser by
test_dashboard_browser.py."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

import pdsim
from pdsim.cli import main
from pdsim.report.figures import PLOTLY_JS, report_html, write_plotly_js

MB = 2**20


@pytest.fixture(scope="module")
def runs():
    from builders import resolve, scenario_dict

    return {k: pdsim.simulate(resolve(scenario_dict(k))) for k in ("colocated", "disagg")}


def test_reports_in_a_folder_share_one_plotly_js(tmp_path, runs):
    report_html(runs["disagg"], tmp_path / "a.html")
    js = tmp_path / PLOTLY_JS
    first = js.stat()
    report_html(runs["colocated"], tmp_path / "b.html")
    assert js.stat().st_mtime_ns == first.st_mtime_ns  # written once, not again
    from plotly.offline import get_plotlyjs

    assert js.read_text(encoding="utf-8") == get_plotlyjs() and 3 * MB < first.st_size < 10 * MB
    for name in ("a.html", "b.html"):
        page = (tmp_path / name).read_text(encoding="utf-8")
        assert f"<script src='{PLOTLY_JS}'" in page and page.count("Plotly.newPlot") >= 5
        assert (tmp_path / name).stat().st_size < 0.5 * MB  # the data only
    assert "KV transfer bandwidth per link" in (tmp_path / "a.html").read_text(encoding="utf-8")
    assert "KV transfer bandwidth per link" not in (tmp_path / "b.html").read_text(encoding="utf-8")  # colocated
    assert oct(js.stat().st_mode & 0o777) == oct(0o666 & ~_umask())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.html", "b.html", PLOTLY_JS]  # no temp files left


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_stale_or_torn_plotly_js_is_replaced(tmp_path):
    (tmp_path / PLOTLY_JS).write_text("/* half a file")
    write_plotly_js(tmp_path)
    assert (tmp_path / PLOTLY_JS).stat().st_size > 3 * MB


def test_standalone_report_inlines_plotly(tmp_path, runs):
    report_html(runs["colocated"], tmp_path / "r.html", standalone=True)
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert (tmp_path / "r.html").stat().st_size > 3 * MB and f"src='{PLOTLY_JS}'" not in page
    assert not (tmp_path / PLOTLY_JS).exists()


def test_run_command_writes_a_shared_or_a_standalone_report(tmp_path, capsys):
    from builders import scenario_dict

    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(scenario_dict("colocated")))
    assert main(["run", str(p), "--out", str(tmp_path / "shared"), "--no-progress"]) == 0
    assert "report.html, plotly.min.js" in capsys.readouterr().out
    assert (tmp_path / "shared" / PLOTLY_JS).is_file()
    assert (tmp_path / "shared" / "report.html").stat().st_size < 0.5 * MB
    assert main(["run", str(p), "--out", str(tmp_path / "alone"), "--no-progress", "--standalone-report"]) == 0
    assert not (tmp_path / "alone" / PLOTLY_JS).exists()
    assert (tmp_path / "alone" / "report.html").stat().st_size > 3 * MB


def report_folder(tmp_path: Path, runs) -> Path:
    """A folder with a shared-js report, and a copy of it alone in a sub-folder (no plotly.min.js)."""
    report_html(runs["disagg"], tmp_path / "report.html")
    (tmp_path / "alone").mkdir()
    (tmp_path / "alone" / "report.html").write_text((tmp_path / "report.html").read_text(encoding="utf-8"),
                                                    encoding="utf-8")
    return tmp_path
