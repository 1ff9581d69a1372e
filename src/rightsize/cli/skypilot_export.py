"""``rightsize plan --skypilot-yaml``: its flags, their checks, and writing the task file.

The flags are checked with the others, before a profile is measured or a plan
searched; the file is written after the plans are printed, so that a plan that
cannot be exported (no single-type plan meets the deadline) still shows.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from rightsize.cli.args import forbid_together, ignored_unless
from rightsize.core.errors import SpecError
from rightsize.core.files import atomic_write_text, check_output_path
from rightsize.core.spec import load_job_spec
from rightsize.perf.comm import CommModel
from rightsize.planning.estimate import PlanRequest
from rightsize.planning.options import InstanceOption
from rightsize.planning.plan import CloudPlan
from rightsize.planning.planner import best_single_type
from rightsize.planning.search import InfeasiblePlanError
from rightsize.planning.skypilot import (
    NodeCommand,
    RightsizeRun,
    TaskShape,
    UserCommand,
    one_worker_type,
    rightsize_checkout,
    task_notes,
    task_yaml,
)
from rightsize.planning.skypilot_launcher import Candidate, launcher_script

#: Flags that only --skypilot-yaml reads.
TASK_ONLY = ("run_job", "run_command", "launcher")


def add_skypilot_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--skypilot-yaml",
        metavar="FILE",
        help="write a SkyPilot task for the best plan, pinned to its cloud and region (a plan "
        "that mixes instance types exports as the best single-type plan; docs/planning.md)",
    )
    parser.add_argument(
        "--run-job",
        metavar="JOB",
        help="the task runs `rightsize run JOB` on its head node, rightsize installed from this "
        "checkout (with --skypilot-yaml)",
    )
    parser.add_argument(
        "--run-command",
        metavar="CMD",
        help="the task runs CMD on every node, with RIGHTSIZE_ROLE, RIGHTSIZE_PS_HOSTS, "
        "RIGHTSIZE_BATCH_PER_NODE and RIGHTSIZE_ITERATIONS set (with --skypilot-yaml)",
    )
    parser.add_argument(
        "--launcher",
        metavar="PATH",
        help="also write a Python launcher that gives SkyPilot the plan's predicted time on "
        "each instance type planned and launches the one with the lowest total cost (with "
        "--skypilot-yaml, --strategy allreduce)",
    )


def node_command(args: argparse.Namespace) -> NodeCommand | None:
    """What the exported task's nodes run, or None when no task is asked for.

    Raises:
        SpecError: a run flag without --skypilot-yaml, both or neither of them with it,
            an unwritable output path, or a bad job file.
    """
    ignored_unless(args, TASK_ONLY, bool(args.skypilot_yaml), "with --skypilot-yaml")
    if not args.skypilot_yaml:
        return None
    check_output_path(args.skypilot_yaml, "--skypilot-yaml")
    if args.launcher:
        if args.strategy != "allreduce":
            raise SpecError("--launcher chooses among the allreduce plan's instance types; "
                            "drop it with --strategy ps (its task file still launches)")  # fmt: skip
        check_output_path(args.launcher, "--launcher")
        if Path(args.launcher).resolve() == Path(args.skypilot_yaml).resolve():
            raise SpecError("--launcher and --skypilot-yaml name the same file; give two paths")
    forbid_together(args, "run_job", ["run_command"], "the task runs one of them")
    if args.run_command:
        return UserCommand(args.run_command)
    if not args.run_job:
        raise SpecError(
            "--skypilot-yaml needs what the nodes run: --run-job JOB (rightsize run on the "
            "head node) or --run-command CMD (your command on every node)"
        )
    spec = load_job_spec(args.run_job)
    if spec.strategy.value != args.strategy:
        raise SpecError(
            f"--run-job {args.run_job} trains with strategy {spec.strategy.value}, and this is "
            f"a plan for --strategy {args.strategy}; plan for the job's strategy"
        )
    return RightsizeRun(Path(args.run_job).resolve(), rightsize_checkout())


def exported_plan(best: CloudPlan, options: Sequence[InstanceOption], comm: CommModel,
                  request: PlanRequest) -> CloudPlan:  # fmt: skip
    """The plan one SkyPilot task can launch: the best, or the best single-type plan.

    Raises:
        InfeasiblePlanError: the best plan mixes types and no single type meets the request.
    """
    if one_worker_type(best):
        return best
    try:
        return best_single_type(options, comm, request)
    except InfeasiblePlanError as exc:
        raise InfeasiblePlanError(
            f"no SkyPilot task written: the best plan, {best.config}, mixes instance types, "
            f"which one task cannot launch, and no single type meets the request ({exc})"
        ) from None


def write_task(path: str, shape: TaskShape, command: NodeCommand, spot: bool) -> Path:
    """Write the task file and say on stderr what it launches (stdout may be JSON)."""
    written = atomic_write_text(Path(path), task_yaml(shape, command, spot))
    plan = shape.plan
    print(f"SkyPilot task written to {written}: {shape.num_nodes}×{shape.instance.name} in "
          f"{shape.infra} for {plan.policy}'s {plan.config}", file=sys.stderr)  # fmt: skip
    for note in task_notes(shape, command):
        print(f"  note: {note}", file=sys.stderr)
    return written


def write_launcher(path: str, task_file: Path, shape: TaskShape, found: Sequence[Candidate],
                   spot: bool, precision: str) -> None:  # fmt: skip
    """Write the launcher script beside the task file and say on stderr what it offers."""
    text = launcher_script(task_file.resolve(), shape, found, spot, precision)
    written = atomic_write_text(Path(path), text)
    written.chmod(written.stat().st_mode | 0o111)
    print(f"SkyPilot launcher written to {written}: {len(found)} instance type"
          f"{'s' if len(found) != 1 else ''} with predicted times "
          f"({', '.join(c.instance.name for c in found)}); run: python {written}",
          file=sys.stderr)  # fmt: skip
