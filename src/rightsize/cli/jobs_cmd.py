"""``rightsize jobs``: your jobs on the service, and where each stands."""

from __future__ import annotations

import argparse

from rightsize.cli.client_args import add_client_options, client_of
from rightsize.cli.output import format_table, print_json
from rightsize.core.units import format_bytes, format_duration

PHASES = ("waiting", "running", "finished", "failed", "cancelled")


def register(parser: argparse.ArgumentParser) -> None:
    parser.description = "List your jobs on the service: phase, budget, throughput, time."
    parser.add_argument("--phase", choices=PHASES, action="append", help="only these (repeat)")
    add_client_options(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    query = "".join(f"&phase={p}" for p in args.phase or ()).replace("&", "?", 1)
    jobs = client_of(args).call("GET", "/jobs" + query)
    if args.json:
        print_json(jobs)
        return 0
    rows = [
        (j["name"], j["phase"], j["workload"], j["policy"], _budget(j["budget"]),
         "-" if j["best_samples_per_s"] is None else f"{j['best_samples_per_s']:.0f}",
         "-" if j["measured_time_s"] is None else format_duration(j["measured_time_s"]))
        for j in jobs
    ]  # fmt: skip
    print(format_table(("job", "phase", "workload", "policy", "budget", "best samples/s",
                        "time"), rows) if rows else "no jobs")  # fmt: skip
    return 0


def _budget(budget: dict) -> str:
    """``2 cpu, 6 GiB``: the API gives memory in bytes (a number a person cannot read)."""
    cpu, memory = budget.get("cpu"), budget.get("memory")
    cores = "?" if cpu is None else f"{cpu:g}"
    return f"{cores} cpu, {'?' if memory is None else format_bytes(memory)}"
