"""Command line: ``pdsim run | list | sweep | experiment | compare | calibrate | sensitivity | workload |
replay | validate | launch | schema | dashboard``.

One module per command under ``pdsim/cli/``; each defines ``register(sub)`` (its argparse
sub-parser, cheap to import) and imports its heavy machinery only when run, so ``pdsim --help``
stays fast. Bad input ends with one ``error:`` line naming the file and field, and exit status
2; ``--debug`` shows tracebacks of unexpected failures.
"""
from __future__ import annotations

import argparse
import importlib
import signal
import sys
import threading

from ..specs.errors import SpecError

# order of appearance in `pdsim --help`
COMMANDS = ("run", "list", "sweep", "experiment", "compare", "calibrate", "sensitivity", "workload", "replay",
            "validate", "launch", "schema", "dashboard")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pdsim", description="Simulate prefill/decode-disaggregated LLM serving clusters.")
    p.add_argument("--debug", action="store_true", help="show tracebacks of unexpected errors")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"{__name__}.{name}_cmd").register(sub)
    return p


def _exit_on_sigterm() -> None:
    """SIGTERM (a scheduler's kill, ``timeout``) ends the CLI as an exit rather than an abrupt
    death, so finalizers run: spilled logs' temporary folders are removed (sim/columns.py). Only
    from the main thread and only over the default handler (a caller's own handler is kept)."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _terminated)


def _terminated(signum, _frame) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    _exit_on_sigterm()
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.fn(args) or 0)
    except SpecError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into head & co.
        return 0
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # noqa: BLE001 - the CLI's last line of defence
        if args.debug:
            raise
        print(f"error: internal failure: {type(err).__name__}: {err} (rerun with --debug for the traceback)",
              file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
