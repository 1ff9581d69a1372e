"""One service job's process: its master, under a lease on the service's capacity.

The service starts ``python -m rightsize.service.runner`` per admitted job with the job
file (JSON, already validated), the launch plan its scheduler admitted, and one end of a
socket pair for the lease (:mod:`lease`). The runner trains the job through the same
front door as ``rightsize run`` (runtime/run.py's ``run_job``), which writes the report
next to the state file; the service copies the state file into the store while it runs
and the report when it ends. The runner dies with the service (parent-death signal), its nodes with it; a
service restarted on the same store starts the runner again, and the master resumes from
the latest checkpoint. SIGTERM (a cancel) checkpoints and stops.

Exit status (runtime/run.py's ``ExitCode``): 0 trained; 1 failed (a node kept failing,
exactly-once broke: the report says, or the service's lease is gone); 2 the job cannot
run; 128+N stopped by signal N. Every end but 0 says why in one ``error:`` line on stderr.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
from pathlib import Path

from rightsize.core.processes import die_with_parent
from rightsize.core.spec import parse_job_spec
from rightsize.scaling.api import Plan
from rightsize.service.lease import PipeLease


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rightsize.service.runner")
    parser.add_argument("--job", type=Path, required=True, help="the job file, JSON")
    parser.add_argument("--launch", type=Path, help="the admitted launch plan, JSON")
    parser.add_argument("--report", type=Path, required=True)
    parser.add_argument("--lease-fd", type=int, required=True)
    parser.add_argument("--parent", type=int, required=True)
    args = parser.parse_args(argv)
    die_with_parent(args.parent)

    from rightsize.runtime.run import run_job  # imports torch: only in the runner's process

    spec = parse_job_spec(json.loads(args.job.read_text()), str(args.job))
    lease = PipeLease(socket.socket(fileno=args.lease_fd))
    outcome = run_job(spec, args.report, lease=lease, launch=_launch(args.launch))
    if outcome.failure:
        print(f"error: {outcome.failure}", file=sys.stderr)
    return outcome.exit_code


def _launch(path: Path | None) -> Plan | None:
    if path is None:
        return None
    return Plan.from_json(json.loads(path.read_text()))


if __name__ == "__main__":
    sys.exit(main())
