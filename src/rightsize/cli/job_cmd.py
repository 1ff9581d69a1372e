"""``rightsize job NAME``: one job on the service — status, shapes, throughput; ``--follow``
streams its changes (the same server-sent events the run page reads) until it ends."""

from __future__ import annotations

import argparse
import json

from rightsize.cli.client_args import add_client_options, client_of
from rightsize.cli.output import format_table, print_json
from rightsize.core.units import format_duration


def register(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Show a job on the service: its phase, the timeline of shapes with "
                          "each decision's reason, its latest throughput and loss, predicted "
                          "and measured time, and the exactly-once check once it ends.")  # fmt: skip
    parser.add_argument("name")
    parser.add_argument("--follow", "-f", action="store_true",
                        help="stream its samples and moves until it ends, then show it "
                             "(with --json: one JSON object per line, {event, data})")  # fmt: skip
    add_client_options(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    client = client_of(args)
    path = f"/jobs/{client.quoted(args.name)}"
    if args.follow:
        follow(client, path, args.json)
        if args.json:
            return 0
    detail = client.call("GET", path)
    if args.json:
        print_json(detail)
        return 0
    show(detail)
    return 0


def follow(client, path: str, as_json: bool) -> None:
    """Print each event as it comes: a phase change, a move, a sample."""
    phase = None
    for name, data in client.events(f"{path}/events"):
        if as_json:
            print(json.dumps({"event": name, "data": data}), flush=True)
        elif name == "job" and data["phase"] != phase:
            phase = data["phase"]
            print(f"{data['name']}: {phase}", flush=True)
        elif name == "shape":
            applied = "" if data["applied"] else " (not applied)"
            took = ("" if data["transition_s"] is None
                    else f", took {format_duration(data['transition_s'])}")  # fmt: skip
            print(f"  {data['time_s']:.1f} s: {data['action']}{applied}{took}: {data['reason']}",
                  flush=True)  # fmt: skip
        elif name == "sample":
            print(f"  {sample_line(data)}", flush=True)
    if not as_json:
        print()  # then the job as it ended


def sample_line(latest: dict) -> str:
    loss = "-" if latest["loss"] is None else f"{latest['loss']:.4f}"
    return (f"at {format_duration(latest['time_s'])}: {latest['steps_done']} steps, "
            f"{latest['samples_per_s']:.0f} samples/s, loss {loss}, {latest['shape']}")


def show(detail: dict) -> None:
    job, latest = detail["job"], detail["latest"]
    print(f"{job['name']}: {job['phase']}, {job['workload']} on {job['dataset'] or 'its dataset'}, "
          f"policy {job['policy']}")  # fmt: skip
    if job["launch_note"]:
        print(f"  started from {job['launch_source']}: {job['launch_note']}")
    if latest:
        print(f"  {sample_line(latest)}")
    launch = next((s for s in detail["shapes"] if s["action"] == "launch" and s["applied"]), None)
    for label in ("predicted", "measured"):
        time_s, core_h = job[f"{label}_time_s"], job[f"{label}_core_h"]
        if time_s is not None:
            cores = "" if core_h is None else f", {core_h:.4g} CPU core-hours"
            note = job["predicted_note"] if label == "predicted" else None
            if label == "measured" and launch and launch["transition_s"] is not None:
                note = f"launch {format_duration(launch['transition_s'])} of it"
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
