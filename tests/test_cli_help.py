"""CLI help: every argument of every command says what it does, and `pdsim --help` stays fast
(no pandas, numpy or simulator import before a command runs)."""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import pytest

from pdsim.cli import COMMANDS, build_parser

from builders import REPO


def _walk(parser: argparse.ArgumentParser, path: tuple[str, ...]):
    """(command path, action) for every action of every (sub)parser."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield path + (name,), ("subcommand", name, helps.get(name))
                yield from _walk(sub, path + (name,))
        elif not isinstance(action, argparse._HelpAction):
            yield path, action


def test_every_argument_of_every_command_has_help():
    missing = []
    seen_commands = set()
    for path, action in _walk(build_parser(), ("pdsim",)):
        if isinstance(action, tuple):
            _kind, name, text = action
            seen_commands.add(name)
            if not text:
                missing.append(f"{' '.join(path)} (the command itself)")
            continue
        if not action.help or action.help == argparse.SUPPRESS or not action.help.strip():
            missing.append(f"{' '.join(path)} {'/'.join(action.option_strings) or action.dest}")
    assert not missing, "arguments without help text: " + ", ".join(missing)
    assert set(COMMANDS) <= seen_commands


def _help_run(args: list[str]) -> tuple[float, set[str]]:
    """Wall time of `pdsim <args> --help` in a fresh interpreter, and which heavy modules it imported."""
    code = ("import sys\nfrom pdsim.cli import main\n"
            "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "heavy = [m for m in ('pandas', 'numpy', 'simpy', 'plotly', 'scipy', 'pdsim.sim.world', 'pdsim.api')"
            " if m in sys.modules]\nsys.stderr.write('HEAVY=' + ','.join(heavy) + '\\n')\n")
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code, *args, "--help"], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=60)
    wall = time.perf_counter() - t0
    line = [ln for ln in proc.stderr.splitlines() if ln.startswith("HEAVY=")]
    assert line, proc.stderr
    heavy = {m for m in line[-1][len("HEAVY="):].split(",") if m}
    assert "usage:" in proc.stdout
    return wall, heavy


def test_top_level_help_is_fast_and_imports_nothing_heavy():
    walls = []
    for _ in range(3):  # best of three: a busy machine's first start pays for the disk cache
        wall, heavy = _help_run([])
        assert not heavy, f"`pdsim --help` imported {sorted(heavy)}"
        walls.append(wall)
    # ~0.15 s on a quiet 2-core machine including the interpreter's start; generous for CI
    assert min(walls) < 1.5, f"`pdsim --help` took {min(walls):.2f} s"


@pytest.mark.parametrize("command", COMMANDS)
def test_command_help_imports_nothing_heavy(command):
    _wall, heavy = _help_run([command])
    assert not heavy, f"`pdsim {command} --help` imported {sorted(heavy)}"
