"""The ``rightsize`` command: one subcommand per capability.

Each subcommand lives in its own module with ``register(subparsers)`` and a
``run(args) -> int``. User errors (:class:`RightsizeError`, bad arguments) print
one line ``error: ...`` on stderr and exit 2; no traceback. Programming errors
are not caught.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence

from rightsize import __version__
from rightsize.cli import (
    catalog_cmd,
    plan_cmd,
    predict_cmd,
    probe_cmd,
    profile_cmd,
    replan_cmd,
    run_cmd,
    simulate_cmd,
    tune_cmd,
    workloads_cmd,
)
from rightsize.core.errors import RightsizeError

COMMANDS = (
    workloads_cmd,
    catalog_cmd,
    profile_cmd,
    predict_cmd,
    plan_cmd,
    replan_cmd,
    probe_cmd,
    run_cmd,
    tune_cmd,
    simulate_cmd,
)
USAGE_ERROR = 2


class Terminated(KeyboardInterrupt):
    """SIGTERM as an exception, so that ``finally`` blocks run (a search stops its workers,
    a job stops its nodes) and the command ends with one line and status 143."""


def _terminated(signum, frame) -> None:
    raise Terminated


class UsageError(RightsizeError):
    """Bad command-line arguments."""


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line naming the help to read, exit 2."""

    def error(self, message: str):  # type: ignore[override]
        raise UsageError(f"{message} (see {self.prog} --help)")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="rightsize",
        description="Plan, run and right-size resources for deep-learning training.",
    )
    parser.add_argument("--version", action="version", version=f"rightsize {__version__}")
    subparsers = parser.add_subparsers(
        dest="command", metavar="COMMAND", parser_class=OneLineParser
    )
    subparsers.required = True
    for command in COMMANDS:
        command.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    on_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminated) if on_main_thread else None
    try:
        args = parser.parse_args(argv)
        return args.run(args)
    except RightsizeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    except KeyboardInterrupt as exc:
        print("error: interrupted", file=sys.stderr)
        return 128 + signal.SIGTERM if isinstance(exc, Terminated) else 130
    except BrokenPipeError:  # e.g. piped into head
        return 0
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
