"""``rightsize submit``: queue a job file on the service."""

from __future__ import annotations

import argparse

from rightsize.cli.client_args import add_client_options, client_of
from rightsize.cli.output import print_json
from rightsize.core.spec import load_job_spec


def register(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Submit a job file (the same as `rightsize run` takes) to the service: "
                          "it waits in the queue until its policy's launch shape fits, then runs. "
                          "The file is checked here first, with the same messages.")  # fmt: skip
    parser.add_argument("job", help="the job YAML file")
    add_client_options(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    spec = load_job_spec(args.job)  # a bad file fails here, before the server is asked
    client = client_of(args)
    job = client.call("POST", "/jobs", spec.model_dump(mode="json", by_alias=True,
                                                       exclude_unset=True))  # fmt: skip
    if args.json:
        print_json(job)
    else:
        print(f"{job['name']}: {job['phase']} (rightsize job {job['name']} to follow it)")
    return 0
