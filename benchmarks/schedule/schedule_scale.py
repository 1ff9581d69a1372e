"""How fast the simulator runs: 10,000 jobs of NEARCHUS's pool through each policy.

The trace is ``nearchus_trace(seed, arrivals=N)`` — Poisson arrivals at one
job per hour, each a pick from the 30-job pool — on cluster B. Every job goes
through its policy's whole life (launch, stability windows, decisions,
restarts, completion). Wall time is measured with ``time.perf_counter`` per
policy, ``repeats`` times, and the median is reported; the simulated results
are recorded too, as a check that the runs did the work.

    python benchmarks/schedule/schedule_scale.py              # 10,000 jobs, 3 repeats
    python benchmarks/schedule/schedule_scale.py --quick      # 1,000 jobs, 1 repeat
    python benchmarks/schedule/schedule_scale.py --link-sharing cluster   # every job's nodes share links
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.lib.envelope import write_report
from benchmarks.lib.load import load_note
from rightsize.cluster.clusters import parse_cluster
from rightsize.cluster.config import SimConfig
from rightsize.cluster.links import LINK_SHARING
from rightsize.cluster.simulator import Simulator
from rightsize.cluster.traces import nearchus_trace
from rightsize.scaling.registry import make_policy

OUT = Path(__file__).resolve().parents[1] / "results" / "schedule_scale.json"
POLICIES = ("fa-bf", "nearchus", "nearchus+", "dlrover", "optimus")
TARGET_S = 10.0  # the goal: 10,000 jobs in under 10 s


def time_policy(name: str, jobs: int, cluster: str, config: SimConfig, repeats: int) -> dict:
    trace = nearchus_trace(config.seed, jobs)
    spec = parse_cluster(cluster)
    walls, summary = [], {}
    for _ in range(repeats):
        started = time.perf_counter()
        result = Simulator(spec, make_policy(name), config).run(trace)
        walls.append(time.perf_counter() - started)
        summary = result.summary()
    wall = statistics.median(walls)
    return {
        "policy": name,
        "wall_s_median": wall,
        "wall_s": walls,
        "jobs_per_s": jobs / wall,
        "under_target": wall < TARGET_S * jobs / 10_000,
        "simulated_avg_jct_h": summary["avg_jct_s"] / 3600,
        "simulated_restarts": summary["restarts"],
        "failed": summary["failed"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1,000 jobs, 1 repeat")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cluster", default="B")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--link-sharing", default=SimConfig.link_sharing, choices=LINK_SHARING)
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args(argv)
    jobs, repeats = (1_000, 1) if args.quick else (args.jobs, args.repeats)
    load_before = load_note()  # 2 shared cores: the load says how far to trust the times
    config = SimConfig(seed=args.seed, link_sharing=args.link_sharing)
    rows = []
    for name in args.policies.split(","):
        row = time_policy(name, jobs, args.cluster, config, repeats)
        print(f"{name:10} {row['wall_s_median']:7.2f} s  {row['jobs_per_s']:8.0f} jobs/s  "
              f"(simulated avg JCT {row['simulated_avg_jct_h']:.2f} h, "
              f"{row['simulated_restarts']} restarts)", flush=True)  # fmt: skip
        rows.append(row)
    data = {
        "simulated": True,
        "note": "wall time of the simulator itself; the job results it produces are simulated",
        "jobs": jobs,
        "repeats": repeats,
        "cluster": args.cluster,
        "link_sharing": args.link_sharing,
        "target_s_per_10k_jobs": TARGET_S,
        "load_before": load_before,
        "load_after": load_note(),
        "results": rows,
    }
    out = Path(args.out)
    write_report(out, data, indent=1)
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
