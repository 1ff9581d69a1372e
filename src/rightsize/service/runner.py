"""One service job's process: its master, under a lease on the service's capacity.

The service starts ``python -m rightsize.service.runner`` per admitted job with the job
file (JSON, already validated), the launch plan its scheduler admitted, and one end of a
socket pair for the lease (:mod:`lease`). The runner trains the job exactly as
``rightsize run`` does (runtime/master.py) and writes the report next to the state file;
the service copies the state file into the store while it runs and the report when it
ends. The runner dies with the service (parent-death signal), its nodes with it; a
service restarted on the same store starts the runner again, and the master resumes from
the latest checkpoint. SIGTERM (a cancel) checkpoints and stops.

Exit status: 0 trained; 1 failed (a node kept failing, or exactly-once broke: the
report says); 2 the job cannot run (one line on stderr); 128+N stopped by signal N.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import sys
from pathlib import Path

from rightsize.core.errors import RightsizeError
from rightsize.core.files import atomic_write_text
from rightsize.core.processes import die_with_parent
from rightsize.core.spec import parse_job_spec
from rightsize.scaling.api import Plan
from rightsize.scaling.registry import make_policy, require_strategy
from rightsize.service.lease import LeaseClosed, PipeLease

JOB_FAILED = 1
CANNOT_RUN = 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rightsize.service.runner")
    parser.add_argument("--job", type=Path, required=True, help="the job file, JSON")
    parser.add_argument("--launch", type=Path, help="the admitted launch plan, JSON")
    parser.add_argument("--report", type=Path, required=True)
    parser.add_argument("--lease-fd", type=int, required=True)
    parser.add_argument("--parent", type=int, required=True)
    args = parser.parse_args(argv)
    die_with_parent(args.parent)

    from rightsize.runtime.errors import ExactlyOnceViolated, JobFailed, JobInterrupted
    from rightsize.runtime.master import Master

    spec = parse_job_spec(json.loads(args.job.read_text()), str(args.job))
    policy = require_strategy(make_policy(spec.policy.name, spec.runtime.metric_interval_s,
                                       **spec.policy.params), spec.strategy)
    lease = PipeLease(socket.socket(fileno=args.lease_fd))
    failure = None
    try:
        master = Master(spec, policy, lease=lease, launch=_launch(args.launch),
                        on_sample=lambda _status: None)  # fmt: skip
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda signum, _frame: master.request_stop(signum))
        report = master.run()
    except ExactlyOnceViolated as exc:
        report, failure = exc.report, str(exc)
    except JobInterrupted as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 128 + exc.signum
    except (JobFailed, LeaseClosed) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return JOB_FAILED
    except RightsizeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return CANNOT_RUN
    atomic_write_text(args.report, json.dumps(report, default=str))
    if failure:
        print(f"error: {failure}", file=sys.stderr)
        return JOB_FAILED
    return 0


def _launch(path: Path | None) -> Plan | None:
    if path is None:
        return None
    return Plan.from_json(json.loads(path.read_text()))


if __name__ == "__main__":
    sys.exit(main())
