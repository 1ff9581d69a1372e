"""``rightsize run``: train a job elastically on this machine and write its report."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rightsize.cli.output import format_table, print_json
from rightsize.cli.store_args import add_store_arguments, open_store
from rightsize.core.files import check_output_path
from rightsize.core.spec import Backend, JobSpec, job_spec_help, load_job_spec, parse_job_spec
from rightsize.core.units import format_bytes, format_duration
from rightsize.runtime import run as front_door
from rightsize.scaling.registry import policy_names

if TYPE_CHECKING:
    from rightsize.runtime.records import ProgressStatus


def register(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Run a training job to completion on this machine (DLRover's Elastic "
        "Trainer, NEARCHUS's runtime): a master shards the data dynamically, launches parameter "
        "servers and workers (or allreduce ranks) as processes in their own cgroups, samples "
        "their CPU, memory and network every metric interval, asks the policy for a new shape, "
        "resizes nodes in place, adds and removes them, and recovers from failures. Rerunning "
        "an interrupted job resumes it from its latest checkpoint."
    )
    parser.epilog = "job file fields:\n" + job_spec_help()
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("job", help="the job YAML file")
    parser.add_argument(
        "--policy",
        help=f"autoscaling policy, overriding the job file's ({', '.join(policy_names())})",
    )
    parser.add_argument(
        "--report", metavar="FILE", help="where to write the JSON report "
        "(default: CHECKPOINT_DIR/NAME-report.json)"
    )  # fmt: skip
    parser.add_argument(
        "--fresh", action="store_true", help="start over even if the state file holds an "
        "unfinished run of this job"
    )  # fmt: skip
    parser.add_argument(
        "--oversubscribe", action="store_true", help="run nodes, shapes and budgets larger "
        "than this machine (runtime.oversubscribe)"
    )  # fmt: skip
    parser.add_argument(
        "--backend", choices=[str(b) for b in Backend], help="where the nodes run, overriding "
        "the job file's runtime.backend: local (this machine) or ray (a Ray cluster's nodes)"
    )  # fmt: skip
    parser.add_argument(
        "--ray-address", metavar="ADDR", help="the Ray cluster to join (runtime.ray_address; "
        "default auto: the cluster this host belongs to)"
    )  # fmt: skip
    add_store_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--quiet", action="store_true", help="no progress display")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.report:  # before the job trains: a report that cannot be written would be lost
        check_output_path(args.report, "--report")
    spec = with_backend(load_job_spec(args.job), args.backend, args.ray_address)
    return run_job(spec, args)


def run_job(spec: JobSpec, args: argparse.Namespace, launch: Any = None) -> int:
    """``run`` and ``torchrun`` on the command line: runtime/run.py's ``run_job`` with
    ``args``' --policy, --report, --fresh and --oversubscribe, a progress display (--quiet),
    the run recorded in the store, the report printed (--json, or a summary) and the exit
    status. ``launch``, a plan to start from (history's)."""
    report_path = Path(args.report or spec.checkpoint.dir / f"{spec.name}-report.json")
    store = open_store(args)  # a bad URL fails here, before anything trains
    command = " ".join(["rightsize", *sys.argv[1:]]) if sys.argv else "rightsize run"
    with ProgressView(quiet=args.quiet) as view:
        outcome = front_door.run_job(
            spec, report_path, policy=args.policy, fresh=args.fresh,
            oversubscribe=args.oversubscribe, launch=launch, warn=view.warn,
            on_sample=view.update, command=command,
        )  # fmt: skip
    if outcome.refused:  # nothing ran: nothing to record
        store.close()
        print(f"error: {outcome.failure}", file=sys.stderr)
        return outcome.exit_code
    remember(store, spec, args.policy or spec.policy.name, outcome.status, outcome.report,
             outcome.failure)  # fmt: skip
    if outcome.report is None:
        print(f"error: {outcome.failure}", file=sys.stderr)
        return outcome.exit_code
    if args.json:
        print_json(outcome.report)
    else:
        print_summary(outcome.report, report_path)
    if outcome.failure:
        print(f"error: {outcome.failure}; report written to {report_path}", file=sys.stderr)
    return outcome.exit_code


def with_backend(spec: JobSpec, backend: str | None, ray_address: str | None) -> JobSpec:
    """The job file's spec with the command line's backend and Ray address, if given."""
    update = {k: v for k, v in (("backend", backend), ("ray_address", ray_address)) if v}
    if not update:
        return spec
    runtime = spec.runtime.model_dump(mode="json", by_alias=True) | update
    return parse_job_spec({**spec.model_dump(mode="json", by_alias=True), "runtime": runtime},
                          "command line")  # fmt: skip


def remember(store, spec, policy: str, phase, report, error: str | None) -> None:
    """Write the run into the store (history for later plans); a store that fails now costs
    a warning, never the run's report."""
    from sqlalchemy.exc import SQLAlchemyError

    from rightsize.service.runs import record_run

    try:
        record_run(store, spec, policy, phase, report, error)
    except SQLAlchemyError as exc:
        print(f"warning: the run was not written to the store: {exc}", file=sys.stderr)
    finally:
        store.close()


class ProgressView:
    """Live progress on stderr: a table redrawn in place on a terminal, else one line per sample."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.live = None
        if not quiet and sys.stderr.isatty():
            from rich.console import Console
            from rich.live import Live

            self.live = Live(console=Console(stderr=True), refresh_per_second=2, transient=False)

    def __enter__(self) -> ProgressView:
        if self.live is not None:
            self.live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.live is not None:
            self.live.__exit__(None, None, None)
            self.live = None

    def warn(self, message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    def update(self, status: ProgressStatus) -> None:
        if self.quiet:
            return
        if self.live is None:
            print("  " + status_line(status), file=sys.stderr, flush=True)
            return
        from rich.text import Text

        self.live.update(Text(status_line(status) + "\n" + node_table(status)))


def status_line(status: ProgressStatus) -> str:
    loss = f"loss {status.loss:.4f}" if status.loss is not None else "loss -"
    used = sum(n.cpu_used_cores for n in status.nodes)
    allocated = sum(n.cpu_allocated_cores for n in status.nodes)
    epoch = "-" if status.epoch is None else status.epoch + 1
    total = status.steps_total if status.steps_total is not None else "?"
    return (
        f"{format_duration(status.time_s)}  epoch {epoch}  steps {status.steps_done}/{total}  "
        f"{status.samples_per_s:.0f} samples/s  {loss}  cpu {used:.2f}/{allocated:.2f}  "
        f"{status.shape}"
    )


def node_table(status: ProgressStatus) -> str:
    rows = [
        (n.name, f"{n.cpu_used_cores:.2f}/{n.cpu_allocated_cores:.2f}",
         f"{format_bytes(n.memory_used_bytes)}/{format_bytes(n.memory_allocated_bytes)}",
         f"{format_bytes(n.net_in_bytes_per_s)}/s", f"{format_bytes(n.net_out_bytes_per_s)}/s",
         f"{n.steps_per_s:.1f}" if n.steps_per_s is not None else "-")
        for n in status.nodes
    ]  # fmt: skip
    return format_table(("node", "cpu used/alloc", "memory", "net in", "net out", "steps/s"), rows)


def print_summary(report: dict[str, Any], path: Path) -> None:
    accounting = report["accounting"]
    once = "yes" if accounting.get("exactly_once") else "NO"
    on = f" on {report['dataset']}" if report.get("dataset") else ""
    print(
        f"{report['job']}: {report['workload']}{on}, {report['strategy']}, "
        f"policy {report['policy']}, isolation {report['isolation']}"
    )
    if "script" in report:
        print(f"  {report['steps']} optimizer steps, {report['samples']} samples in "
              f"{format_duration(report['wall_time_s'])}; {len(report['script']['groups'])} "
              f"group start(s), {report['script']['failed_restarts']} after failures")  # fmt: skip
    else:
        print(
            f"  {report['steps']} steps, {report['samples']} samples, {report['epochs']} "
            f"epoch(s) applied by the parameter holders in "
            f"{format_duration(report['wall_time_s'])}"
        )
    rows = [
        (f"{t['time_s']:.1f}", t["action"], "yes" if t["applied"] else "no",
         "-" if t["transition_s"] is None else format_duration(t["transition_s"]), t["reason"])
        for t in report["timeline"]
    ]  # fmt: skip
    print(format_table(("time_s", "action", "applied", "transition", "reason"), rows))
    restarts = report["restarts"]
    print(f"  node restarts: {sum(restarts['nodes'].values())}, master restarts: "
          f"{restarts['masters']}")  # fmt: skip
    if "script" in report:
        print(f"  data: {accounting['data']}")
        if accounting.get("checked"):
            print(f"  every sample trained exactly once per epoch: {once} (the master's ledger; "
                  f"{accounting['samples_handed_again']} samples handed out again after "
                  "restarts)")  # fmt: skip
    elif accounting.get("checked"):
        print(f"  every sample trained exactly once per epoch: {once} "
              f"(checked on checkpoint v{accounting['checkpoint']})")  # fmt: skip
    print(f"report written to {path}")
