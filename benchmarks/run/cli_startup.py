"""How long the command line takes to start, and what it imports (issue 18 item 6).

Each command runs in a fresh interpreter, ``--repeats`` times; the median wall
time is kept. Timed: ``rightsize --help``, each command's ``--help``, and
``rightsize plan --cloud aws --mode eager`` on a saved ResNet-50 profile (the
one benchmarks/plan/planner_latency.py caches), end to end. One more run of each
reports which slow libraries (torch, lightgbm, scikit-learn, scipy,
matplotlib) it imported. ``--src`` times another checkout's ``src`` the same
way, for the numbers before a change.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.lib.envelope import write_report

SLOW = ("torch", "lightgbm", "sklearn", "scipy", "matplotlib")
COMMANDS = ("workloads", "catalog", "profile", "predict", "plan", "replan", "probe", "run",
            "tune", "simulate")  # fmt: skip
RUN = "import sys; from rightsize.cli.main import main; sys.argv[0] = 'rightsize'; main()"
IMPORTS = (
    "import contextlib, sys; from rightsize.cli.main import main\n"
    "with contextlib.suppress(SystemExit): main(sys.argv[1:])\n"
    f"print(','.join(m for m in {SLOW!r} if m in sys.modules), file=sys.stderr)"
)


def timed(argv: list[str], env: dict, repeats: int) -> dict:
    """The median wall time of ``rightsize argv``, its exit status, and what it imported."""
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", RUN, *argv], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        seconds.append(time.perf_counter() - start)
    probe = subprocess.run([sys.executable, "-c", IMPORTS, *argv], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    last = probe.stderr.strip().splitlines()[-1:] if probe.returncode == 0 else []
    return {"argv": argv, "median_seconds": statistics.median(seconds), "seconds": seconds,
            "returncode": done.returncode,
            "slow_imports": [m for line in last for m in line.split(",") if m]}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--src", default="src", help="the rightsize sources to time")
    parser.add_argument(
        "--profile", default="benchmarks/results/profiles/resnet50-synthetic-cifar-cpu.json"
    )
    parser.add_argument("--out", default="benchmarks/results/cli_startup.json")
    args = parser.parse_args(argv)
    env = {**os.environ, "PYTHONPATH": str(Path(args.src).resolve())}
    plan = ["plan", "--profile", args.profile, "--global-batch", "1024", "--iterations", "1000",
            "--deadline", "1h", "--cloud", "aws", "--mode", "eager", "--quiet"]  # fmt: skip
    runs = [[], *([c] for c in COMMANDS)]
    results = [timed([*run, "--help"], env, args.repeats) for run in runs]
    results.append(timed(plan, env, args.repeats))
    for r in results:
        print(f"{' '.join(r['argv'][:2]):24} {r['median_seconds']:6.2f} s  {r['slow_imports']}"
              f"{'' if r['returncode'] == 0 else '  exit ' + str(r['returncode'])}",
              file=sys.stderr)  # fmt: skip
    report = {"benchmark": "cli_startup", "src": args.src, "repeats": args.repeats,
              "results": results}  # fmt: skip
    write_report(args.out, report)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
