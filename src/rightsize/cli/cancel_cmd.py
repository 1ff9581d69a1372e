"""``rightsize cancel NAME``: stop a job on the service, wherever it is."""

from __future__ import annotations

import argparse

from rightsize.cli.client_args import add_client_options, client_of
from rightsize.cli.output import print_json


def register(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Cancel a job: a waiting one leaves the queue; a running one takes a "
                          "checkpoint and stops (its resources go back to the queue).")  # fmt: skip
    parser.add_argument("name")
    add_client_options(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    client = client_of(args)
    job = client.call("POST", f"/jobs/{client.quoted(args.name)}/cancel")
    if args.json:
        print_json(job)
    else:
        state = "cancelling" if job["phase"] == "running" else job["phase"]
        print(f"{job['name']}: {state}")
    return 0
