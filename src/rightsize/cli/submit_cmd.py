"""``rightsize submit``: queue a job file on the service."""

from __future__ import annotations

import argparse
from pathlib import Path

from rightsize.cli.client_args import add_client_options, client_of
from rightsize.cli.output import print_json
from rightsize.core.errors import SpecError
from rightsize.core.files import read_text
from rightsize.core.spec import JobSpec, load_job_spec
from rightsize.runtime.script_check import check_script
from rightsize.service.uploads import SCRIPT_PREFIX


def register(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Submit a job file (the same as `rightsize run` takes) to the service: "
                          "it waits in the queue until its policy's launch shape fits, then runs. "
                          "The file is checked here first, with the same messages; a job file's "
                          "script (script: train.py) is uploaded with it.")  # fmt: skip
    parser.add_argument("job", help="the job YAML file")
    add_client_options(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    spec = load_job_spec(args.job)  # a bad file fails here, before the server is asked
    source = script_source(spec)
    client = client_of(args)
    body = spec.model_dump(mode="json", by_alias=True, exclude_unset=True)
    if source is not None:  # the service runs uploaded scripts only: upload it first
        name = Path(spec.script).name
        body["script"] = client.call("POST", "/scripts", {"name": name, "source": source})["script"]
    job = client.call("POST", "/jobs", body)
    if args.json:
        print_json(job)
    else:
        print(f"{job['name']}: {job['phase']} (rightsize job {job['name']} --follow to follow it)")
    return 0


def script_source(spec: JobSpec) -> str | None:
    """The text of the job file's own script, to upload (None: a workload, or a script that
    was uploaded already, ``upload:NAME.py``).

    Raises:
        SpecError: a module (-m: nothing to upload), or a script that cannot be read or parsed.
    """
    if not spec.is_script or spec.script.startswith(SCRIPT_PREFIX):
        return None
    if spec.module:
        raise SpecError("the service runs an uploaded file; give the script's path, "
                        "not a module (module: true)", field="script")  # fmt: skip
    check_script(spec)
    return read_text(spec.script, "script")
