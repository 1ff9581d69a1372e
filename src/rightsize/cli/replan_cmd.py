"""``rightsize replan``: a new plan after spot instances were lost (Srift §4.5)."""

from __future__ import annotations

import argparse

from rightsize.cli.args import bounded
from rightsize.cli.output import progress_printer
from rightsize.cli.plan_cmd import (
    add_request_arguments,
    comm_model,
    device_choice,
    print_plans,
    request_from,
)
from rightsize.cli.profiles import resolve_profiles
from rightsize.core.catalog import load_catalogs
from rightsize.core.errors import SpecError
from rightsize.core.limits import MAX_ITERATIONS, Bound
from rightsize.core.units import format_duration, format_money, parse_duration, parse_money
from rightsize.planning.planner import build_options, parse_instances
from rightsize.planning.replan import DETACH_S, LAUNCH_S, Interruption, Progress, replan
from rightsize.planning.search import SearchSettings

#: Iterations already finished (--iterations is checked against them when re-planning).
DONE = Bound(0, MAX_ITERATIONS, integer=True)


def register(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Srift's re-planning: given the original request, the progress so far and the "
        "instance types lost, search again on the remaining iterations, time and money. A lost "
        "type is never requested again (its VMs still running may stay); new VMs pay the launch "
        "time and every plan the detach time."
    )
    add_request_arguments(parser)
    parser.add_argument(
        "--done", type=bounded(DONE), required=True, metavar="N", help="iterations finished"
    )
    parser.add_argument("--elapsed", required=True, help="time spent so far, e.g. 222s")
    parser.add_argument("--spent", default="0", help="money spent so far, e.g. $1.20")
    parser.add_argument(
        "--lost", required=True, metavar="TYPE,...", help="preempted instance types"
    )
    parser.add_argument("--running", default="", metavar="TYPE:COUNT,...", help="VMs still running")
    parser.add_argument(
        "--launch-time",
        default=f"{LAUNCH_S:g}s",
        help="time to launch new VMs (default %(default)s)",
    )
    parser.add_argument(
        "--detach-time",
        default=f"{DETACH_S:g}s",
        help="time to detach the lost VM's volume (default %(default)s)",
    )
    parser.set_defaults(run=run)  # fmt: skip


def run(args: argparse.Namespace) -> int:
    progress = progress_printer(args.quiet)
    catalog = load_catalogs(args.cloud or ["aws"])
    caps = parse_instances(args.instances, catalog)
    lost = frozenset(parse_instances(args.lost, catalog, "--lost"))
    if not lost:
        raise SpecError("--lost names no instance type; give the preempted types, e.g. p3.2xlarge")
    running = parse_instances(args.running, catalog, "--running") if args.running else {}
    interruption = Interruption(
        lost, running, parse_duration(args.launch_time, "--launch-time"),
        parse_duration(args.detach_time, "--detach-time"),
    )  # fmt: skip
    status = Progress(
        args.done, parse_duration(args.elapsed, "--elapsed"), parse_money(args.spent, "--spent")
    )
    notes: list[str] = []
    request, comm = request_from(args), comm_model(args.comm_model, notes)  # before any profiling
    options = build_options(resolve_profiles(args, progress), catalog, caps, args.spot, args.region,
                            device_choice(args))
    plans = replan(options, comm, request, status, interruption,
                   SearchSettings(top=args.top))  # fmt: skip
    header = (f"re-planning {plans[0].iterations} remaining iterations after losing "
              f"{', '.join(sorted(lost))} ({format_duration(status.elapsed_s)} and "
              f"{format_money(status.spent_usd)} spent)")  # fmt: skip
    return print_plans(plans, header, args.json, notes=notes)
