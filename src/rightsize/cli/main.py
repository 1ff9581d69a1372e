"""The ``rightsize`` command: one subcommand per capability.

Each subcommand lives in its own module with ``register(parser)``, which adds its
arguments and sets ``run(args) -> int``. Only the named command's module is imported
(:data:`COMMANDS`), so ``rightsize --help`` and a command that needs no torch start
without importing it. User errors (:class:`RightsizeError`, bad arguments) print
one line ``error: ...`` on stderr and exit 2; no traceback. Programming errors
are not caught.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import threading
from collections.abc import Sequence

from rightsize import __version__
from rightsize.core.errors import RightsizeError

#: name, module, and the line ``rightsize --help`` shows for it, in that order.
COMMANDS = (
    ("workloads", "rightsize.cli.workloads_cmd", "list the model zoo and datasets"),
    ("catalog", "rightsize.cli.catalog_cmd", "list cloud instance types and prices"),
    ("profile", "rightsize.cli.profile_cmd",
     "measure a workload: B_max, latency per batch, layers, memory"),
    ("predict", "rightsize.cli.predict_cmd",
     "predict step time per batch from a saved profile, here or on a GPU"),
    ("plan", "rightsize.cli.plan_cmd",
     "predict time and cost of cloud configurations and pick the best"),
    ("replan", "rightsize.cli.replan_cmd",
     "re-plan the rest of a job after spot instances were preempted"),
    ("probe", "rightsize.cli.probe_cmd", "measure allreduce bus bandwidth and train the comm model"),
    ("run", "rightsize.cli.run_cmd",
     "train a job elastically: master, shards, PS/allreduce nodes in cgroups"),
    ("torchrun", "rightsize.cli.torchrun_cmd",
     "run your own torchrun script unchanged, measured and right-sized"),
    ("tune", "rightsize.cli.tune_cmd",
     "hyper-parameter search with trials packed into one process (Packed Hyperband)"),
    ("simulate", "rightsize.cli.simulate_cmd", "compare autoscaling policies on a simulated cluster"),
    ("serve", "rightsize.cli.serve_cmd", "run the service: API, store of runs, many jobs at once"),
    ("submit", "rightsize.cli.submit_cmd", "submit a job file to the service"),
    ("jobs", "rightsize.cli.jobs_cmd", "list your jobs on the service"),
    ("job", "rightsize.cli.job_cmd", "show one job on the service: shapes, throughput, accounting"),
    ("cancel", "rightsize.cli.cancel_cmd", "cancel a job on the service"),
)  # fmt: skip
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


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The command line, with arguments for the command ``argv`` names (every command listed).

    The other commands' modules are not imported: their parsers only name them.
    """
    parser = OneLineParser(
        prog="rightsize",
        description="Plan, run and right-size resources for deep-learning training.",
    )
    parser.add_argument("--version", action="version", version=f"rightsize {__version__}")
    subparsers = parser.add_subparsers(
        dest="command", metavar="COMMAND", parser_class=OneLineParser
    )
    subparsers.required = True
    named = _named_command(sys.argv[1:] if argv is None else argv)
    for name, module, summary in COMMANDS:
        command = subparsers.add_parser(name, help=summary)
        if name == named:
            importlib.import_module(module).register(command)
    return parser


def _named_command(argv: Sequence[str]) -> str | None:
    """The command in ``argv``: its first word that is not an option (the top level takes
    no option with a value)."""
    return next((word for word in argv if not word.startswith("-")), None)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser(argv)
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
