"""The package list in pyproject.toml names every pdsim package, so a plain (non-editable)
``pip install .`` carries all of them."""
from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_every_package_is_listed():
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.relative_to(REPO).parent.parts) for p in (REPO / "pdsim").rglob("*.py")
             if "__pycache__" not in p.parts}
    missing = sorted(found - listed)
    assert not missing, f"add to pyproject.toml [tool.setuptools] packages: {missing}"
