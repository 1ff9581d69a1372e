"""Instructions the simulator executes for N jobs of each policy, per Python interpreter.

Wall time on this shared 2-core host moves by several percent from run to run; the count
of instructions a run executes (valgrind's callgrind) hardly moves (about 0.5%), so two
checkouts of rightsize can be compared by it: give each checkout's interpreter as
``NAME=PYTHON`` (an interpreter whose ``import rightsize`` finds that checkout). Each run
simulates ``nearchus_trace(1, N)`` on cluster B, as ``schedule_scale.py`` does; the
instructions of a run of 0 jobs (the imports) are taken off. Needs ``valgrind``.

    python benchmarks/schedule/schedule_instructions.py --jobs 300 \\
        --python before=../before/.venv/bin/python --python after=.venv/bin/python
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.lib.envelope import write_report

OUT = Path(__file__).resolve().parents[1] / "results" / "schedule_instructions.json"
POLICIES = ("fa-bf", "nearchus", "nearchus+", "dlrover", "optimus")
#: What each run executes: only names both sides of a comparison have (the simulator's
#: public entry points), so any checkout since issue 39 began can run it.
SIMULATE = """
import sys
from rightsize.cluster.clusters import parse_cluster
from rightsize.cluster.config import SimConfig
from rightsize.cluster.simulator import Simulator
from rightsize.cluster.traces import nearchus_trace
from rightsize.scaling.registry import make_policy
jobs, policy = int(sys.argv[1]), sys.argv[2]
if jobs:
    summary = Simulator(parse_cluster("B"), make_policy(policy), SimConfig(seed=1)).run(
        nearchus_trace(1, jobs)).summary()
    print(summary["avg_jct_s"], summary["restarts"])
"""


def instructions(python: str, jobs: int, policy: str) -> tuple[int, str]:
    """Instructions of one run under callgrind, and what the run printed."""
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
         python, "-c", SIMULATE, str(jobs), policy],
        capture_output=True, text=True, check=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},  # the same dict layouts every run
    )  # fmt: skip
    found = re.search(r"Collected : (\d+)", done.stderr)
    if not found:
        raise RuntimeError(f"callgrind printed no instruction count:\n{done.stderr[-2000:]}")
    return int(found.group(1)), done.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--python", action="append", required=True, metavar="NAME=PYTHON",
                        help="a checkout's interpreter, named (give two or more)")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        parser.error("valgrind is not installed (apt-get install valgrind)")
    pythons = dict(item.split("=", 1) for item in args.python)
    rows = []
    for policy in args.policies.split(","):
        row: dict = {"policy": policy}
        for name, python in pythons.items():
            total, result = instructions(python, args.jobs, policy)
            base, _ = instructions(python, 0, policy)
            row[name] = {"instructions": total - base, "avg_jct_s_and_restarts": result}
        first = next(iter(pythons))
        for name in pythons:
            row[f"{name}_over_{first}"] = row[name]["instructions"] / row[first]["instructions"]
        print(policy, {k: v for k, v in row.items() if k.endswith(f"_over_{first}")}, flush=True)
        rows.append(row)
    write_report(args.out, {
        "benchmark": "schedule_instructions", "jobs": args.jobs, "pythons": pythons,
        "results": rows,
    })  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
