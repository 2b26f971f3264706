"""The reliability review's scenario inputs (tests/bad_inputs/scenarios/): each ends within
seconds in a clean one-line message with exit status 2 (or, for inputs that used to hang or
lose requests, a correct run). Each file's header says what is expected:
``# expect: exit=N [--flag=value ...] text that must appear in the output``."""
from __future__ import annotations

import re
import signal
import sys
from pathlib import Path

import pytest

from pdsim.cli import main

CASES = Path(__file__).parent / "bad_inputs" / "scenarios"


def _expectation(path: Path) -> tuple[int, list[str], str]:
    head = path.read_bytes()[:2000].decode("latin-1")
    m = re.search(r"^# expect: exit=(\d+) (.*)$", head, re.M)
    assert m, f"{path.name}: no '# expect:' header"
    rest = m.group(2)
    flags = re.findall(r"(--[\w-]+)=(\S+)", rest)
    text = re.sub(r"--[\w-]+=\S+\s*", "", rest).strip()
    args = [a for f, v in flags for a in (f, v)]
    return int(m.group(1)), args, text


class _Timeout(Exception):
    pass


def _run(argv: list[str], seconds: int = 20) -> int:
    def alarm(*_):
        raise _Timeout(f"no answer within {seconds} s: {argv}")
    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        return main(argv)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("path", sorted(CASES.glob("*.yaml")), ids=lambda p: p.stem)
def test_bad_scenario_input(path, capsys, tmp_path):
    code, flags, text = _expectation(path)
    rc = _run(["run", str(path), "--no-progress", "--no-report", *flags])
    out = capsys.readouterr()
    both = out.out + out.err
    assert rc == code, both[-2000:]
    assert "Traceback" not in both
    assert text in both, both[-2000:]
    if code == 2:
        lines = [ln for ln in out.err.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), out.err[:2000]
        assert len(lines[0]) < 400  # short: never a file's content or a huge value
    else:
        assert "stuck" not in both


def test_overlong_string_field_is_refused(tmp_path, capsys):
    p = tmp_path / "S29.yaml"
    p.write_text("name: x\nhardware: '" + "h" * 1_000_000 + "'\nmodel: llama-3.1-8b\n"
                 "cluster: {colocated: [{count: 1, gpus: 1}]}\n")
    assert _run(["run", str(p), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "hardware: a string of 1,000,000 characters" in err and len(err) < 400


def test_disallowed_plugin_module_is_never_imported(capsys):
    sys.modules.pop("this", None)
    assert _run(["run", str(CASES / "X06_plugin_this.yaml"), "--no-progress"]) == 2
    assert "this" not in sys.modules
    assert "Beautiful is better than ugly" not in capsys.readouterr().out
