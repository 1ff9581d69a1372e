"""``rightsize job NAME``: one job on the service — status, shapes, throughput."""

from __future__ import annotations

import argparse

from rightsize.cli.client_args import add_client_options, client_of
from rightsize.cli.output import format_table, print_json
from rightsize.core.units import format_duration


def register(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Show a job on the service: its phase, the timeline of shapes with "
                          "each decision's reason, its latest throughput and loss, predicted "
                          "and measured time, and the exactly-once check once it ends.")  # fmt: skip
    parser.add_argument("name")
    add_client_options(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    client = client_of(args)
    detail = client.call("GET", f"/jobs/{client.quoted(args.name)}")
    if args.json:
        print_json(detail)
        return 0
    job, latest = detail["job"], detail["latest"]
    print(f"{job['name']}: {job['phase']}, {job['workload']} on {job['dataset'] or 'its dataset'}, "
          f"policy {job['policy']}")  # fmt: skip
    if job["launch_note"]:
        print(f"  started from {job['launch_source']}: {job['launch_note']}")
    if latest:
        loss = "-" if latest["loss"] is None else f"{latest['loss']:.4f}"
        print(
            f"  at {format_duration(latest['time_s'])}: {latest['steps_done']} steps, "
            f"{latest['samples_per_s']:.0f} samples/s, loss {loss}, {latest['shape']}"
        )
    for label in ("predicted", "measured"):
        time_s, core_h = job[f"{label}_time_s"], job[f"{label}_core_h"]
        if time_s is not None:
            cores = "" if core_h is None else f", {core_h:.4g} CPU core-hours"
            note = job["predicted_note"] if label == "predicted" else None
            print(f"  {label}: {format_duration(time_s)}{cores}" + (f" ({note})" if note else ""))
    accounting = job["accounting"]
    if accounting and accounting.get("checked"):
        once = "yes" if accounting.get("exactly_once") else "NO"
        print(f"  every sample trained exactly once per epoch: {once}")
    if job["error"]:
        print(f"  error: {job['error']}")
    rows = [
        (f"{s['time_s']:.1f}", s["action"], "yes" if s["applied"] else "no",
         "-" if s["transition_s"] is None else format_duration(s["transition_s"]), s["reason"])
        for s in detail["shapes"]
    ]  # fmt: skip
    if rows:
        print(format_table(("time_s", "action", "applied", "transition", "reason"), rows))
    return 0
