"""Print one of README.md's CI-run command blocks, exactly as written.

Usage: python3 .ci/readme_command.py quick-start|tests

The README marks the blocks CI runs with an HTML comment ``<!-- ci: NAME ... -->`` on the line
before a fenced ```bash block, so the commands a user copies are the commands CI runs.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path


def block(readme: str, name: str) -> str:
    pattern = re.compile(r"<!-- ci: " + re.escape(name) + r"\b[^>]*-->\s*\n```bash\n(.*?)\n```", re.S)
    found = pattern.findall(readme)
    if len(found) != 1:
        raise SystemExit(f"README.md: expected exactly one '<!-- ci: {name} -->' bash block, found {len(found)}")
    return found[0].strip()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: readme_command.py quick-start|tests")
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    print(block(text, sys.argv[1]))
