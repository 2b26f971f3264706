"""The output folder of a sweep or comparison, checked before anything is simulated."""
from __future__ import annotations

from pathlib import Path

from ..specs.errors import SpecError


def check_out_dir(out_dir: str | Path) -> Path:
    """The output folder, created if missing and checked writable before anything is simulated."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise SpecError(f"{out} is a file; expected a folder (created if missing)", field="--out")
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".pdsim-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        raise SpecError(f"cannot write to {out}: {err.strerror or err}", field="--out") from None
    return out
