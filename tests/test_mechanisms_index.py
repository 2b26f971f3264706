"""The index of the mechanism tests (tests/mechanisms/README.md) is where a reader finds the test
of each mechanism, its public source and its page (issue 23, "Done when"): every test file in
tests/mechanisms is in it, and every file and page it names exists."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MECH = ROOT / "tests" / "mechanisms"


def _rows() -> list[str]:
    return [line for line in (MECH / "README.md").read_text().splitlines() if line.startswith("| ") and "`test_" in line]


def test_every_mechanism_test_file_is_in_the_index():
    indexed = {name for line in _rows() for name in re.findall(r"`(test_[a-z0-9_]+\.py)`", line)}
    missing = sorted(p.name for p in MECH.glob("test_*.py") if p.name not in indexed)
    assert not missing, f"tests/mechanisms/README.md does not index {missing}"


def test_every_test_and_page_the_index_names_exists():
    rows = _rows()
    assert len(rows) >= 10
    for line in rows:
        for name in re.findall(r"`(test_[a-z0-9_]+\.py)`", line):
            assert (MECH / name).is_file(), name
        pages = re.findall(r"`(docs/[a-z0-9_./-]+\.md)`", line)
        assert pages, line[:80]
        for page in pages:
            assert (ROOT / page).is_file(), page
