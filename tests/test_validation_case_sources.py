"""What the committed validation cases say about their sources agrees with their own files: a case
recorded from a CC-BY-4.0 trace carries the attribution and the changes made, and is listed in the
repository's data licence notes; the host.background a case simulates is the one its host.json
measured (host_share.py watch)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CASES = sorted(p.parent for p in (ROOT / "validation").glob("*/case.yaml"))


def _case(folder: Path) -> dict:
    return yaml.safe_load((folder / "case.yaml").read_text())


@pytest.mark.parametrize("folder", [c for c in CASES if "CC-BY" in str(_case(c).get("source", {}).get("licence"))],
                         ids=lambda p: p.name)
def test_a_case_from_a_cc_by_trace_attributes_it(folder):
    lic = _case(folder)["source"]["licence"]
    assert "Patel et al." in lic and "Azure Public Dataset" in lic and "changes made" in lic
    assert f"`validation/{folder.name}/real/`" in (ROOT / "workloads/traces/LICENSES.md").read_text()


@pytest.mark.parametrize("folder", [c for c in CASES if (c / "real" / "host.json").is_file()], ids=lambda p: p.name)
def test_the_simulated_background_is_the_measured_one(folder):
    measured = json.loads((folder / "real" / "host.json").read_text())["background"]
    given = [float(s.split("=", 1)[1]) for s in _case(folder).get("set") or [] if s.startswith("host.background=")]
    assert given == [pytest.approx(measured, abs=0.005)]
