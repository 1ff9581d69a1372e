"""Chaos benchmark: seeded schedules of SIGKILL and SIGSTOP against real jobs (issue 16).

Each schedule (``rightsize.runtime.chaos.random_schedule(seed)``: 1-3 strikes at a
worker, a parameter server or the master, half of them within 2 s of the previous
one, 15% of them a SIGSTOP of 5-40 s) runs ``rightsize run`` on the counting job
(2 PS + 2 workers, 4,096 samples, 40 epochs, checkpoints every 2 s) as a user would, reruns it
after a master kill, and is judged by the trained weights: minus each weight is how
often its sample was applied. The JSON has every schedule with its strikes, exit
codes, per-tensor counts, the runtime's recovery rows (what it did and how long it
took) and the verdict; the summary counts verdicts and gives recovery medians.

    python benchmarks/run/runtime_chaos.py --schedules 30 --out benchmarks/results/runtime_chaos.json
    python benchmarks/run/runtime_chaos.py --quick          # 2 schedules, to check it works

``--source DIR`` runs the jobs with another checkout's ``src`` first on PYTHONPATH
(the code before a change, to measure it side by side; that checkout needs
``rightsize/workloads/counter.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.lib.envelope import write_report
from benchmarks.lib.load import load_note
from rightsize.runtime.chaos import counter_job, random_schedule, run_schedule

#: Timeline actions that are the runtime recovering from a strike.
RECOVERY_ACTIONS = ("relaunch_worker", "restore_ps", "resume", "restart_group")


def recovery_rows(report_path: Path) -> list[dict]:
    """What the runtime did to recover, from the job's report (empty if there is none)."""
    try:
        report = json.loads(report_path.read_text())
    except (OSError, ValueError):
        return []
    return [
        {"action": t["action"], "time_s": round(t["time_s"], 2),
         "transition_s": round(t["transition_s"] or 0.0, 3), "reason": t["reason"]}
        for t in report["timeline"] if t["action"] in RECOVERY_ACTIONS and t["applied"]
    ]  # fmt: skip


def run(seeds: range, epochs: int, timeout_s: float, directory: Path) -> list[dict]:
    rows = []
    for seed in seeds:
        job, spec = counter_job(directory / f"seed{seed}", epochs=epochs)
        outcome = run_schedule(job, spec, random_schedule(seed), timeout_s=timeout_s)
        row = outcome.to_dict()
        row["recovery"] = recovery_rows(spec.checkpoint.dir / f"{spec.name}-report.json")
        rows.append(row)
        print(f"seed {seed:3d}: {row['verdict']:<14} {row['wall_s']:6.1f}s  {row['schedule']}",
              file=sys.stderr, flush=True)  # fmt: skip
    return rows


def summarize(rows: list[dict]) -> dict:
    per_action: dict[str, list[float]] = {}
    for row in rows:
        for r in row["recovery"]:
            per_action.setdefault(r["action"], []).append(r["transition_s"])
    landed = [s for row in rows for s in row["landed"]]
    return {
        "schedules": len(rows),
        "passed": sum(row["passed"] for row in rows),
        "verdicts": dict(Counter(row["verdict"] for row in rows)),
        "strikes": len(landed),
        "strikes_hit": sum(s["pid"] is not None for s in landed),
        "strikes_by_kind": dict(Counter(s["strike"].split()[1] + " " + s["strike"].split()[-1]
                                        .split("[")[0] for s in landed)),  # fmt: skip
        "master_reruns": sum(max(0, len(row["exit_codes"]) - 1) for row in rows),
        "median_wall_s": statistics.median(row["wall_s"] for row in rows) if rows else None,
        "recovery_median_s": {a: statistics.median(v) for a, v in sorted(per_action.items())},
        "recovery_count": {a: len(v) for a, v in sorted(per_action.items())},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--schedules", type=int, default=30)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--timeout", type=float, default=400.0, help="seconds per schedule")
    parser.add_argument("--source", help="run the jobs with this checkout's src on PYTHONPATH")
    parser.add_argument("--quick", action="store_true", help="2 schedules: checks it works")
    parser.add_argument("--out", default="benchmarks/results/runtime_chaos.json")
    args = parser.parse_args(argv)
    count = 2 if args.quick else args.schedules
    if args.source:
        os.environ["PYTHONPATH"] = str(Path(args.source) / "src")
    before = load_note()
    with tempfile.TemporaryDirectory(prefix="rightsize-chaos-") as tmp:
        rows = run(range(args.first_seed, args.first_seed + count), args.epochs, args.timeout,
                   Path(tmp))  # fmt: skip
    summary = summarize(rows)
    print(json.dumps(summary, indent=2), file=sys.stderr)
    write_report(args.out, {
        "benchmark": "runtime_chaos",
        "simulated": False,
        "source": args.source or "this checkout",
        "load_before": before,
        "load_after": load_note(),
        "epochs": args.epochs,
        "summary": summary,
        "schedules": rows,
    })  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
