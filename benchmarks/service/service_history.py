"""History feeds plans (issue 19 item 4): the same job submitted twice to the service.

The first submission has no history: its policy launches it (NEARCHUS+ at ``R0`` of the
budget) and grows it. The second finds the first in the store and starts at the fastest
shape the first measured (service/history.py). Both run alone on the service's capacity
(the machine), one after the other, through the real allocator and runner processes.
Reported per run: where the launch shape came from, the time to 95% of the run's best
throughput (a running median of 3 samples, service/ingest.py), the best throughput, and
the job's completion time — the goal is that the second reaches 95% sooner.

    python benchmarks/service/service_history.py --out benchmarks/results/service_history.json
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.lib.envelope import write_report
from benchmarks.lib.load import load_note
from rightsize.core.spec import parse_job_spec
from rightsize.runtime.backends.local import machine_resources
from rightsize.service.allocator import Allocator
from rightsize.service.models import JobPhase
from rightsize.service.store import Store


def job(epochs: int, policy: str) -> dict:
    """Wide & Deep on 200k synthetic Criteo rows (issue 17's right-sizing workload)."""
    return {"name": "history", "workload": "wide-deep", "dataset": "synthetic-criteo",
            "options": {"embed_dim": 8, "hidden": [64, 32]}, "dataset_size": 200_000,
            "batch_size": 512, "epochs": epochs, "strategy": "ps",
            "budget": {"cpu": 2, "memory": "8Gi"}, "policy": {"name": policy},
            "checkpoint": {"interval": "60s"}, "training": {"optimizer": "adagrad", "lr": 0.05},
            "runtime": {"metric_interval": "2s", "startup_timeout": "300s"}}  # fmt: skip


def run_once(allocator: Allocator, store: Store, data: dict, timeout_s: float) -> dict:
    view = allocator.submit(parse_job_spec(data), owner_id=None)
    deadline = time.monotonic() + timeout_s
    while not JobPhase(store.job_by_id(view.id).phase).done:
        if time.monotonic() > deadline:
            allocator.cancel(view.name)
            raise SystemExit(f"error: {view.name} did not finish within {timeout_s:g}s")
        time.sleep(2)
    done = store.job_by_id(view.id)
    shapes = [s for s in store.shapes(view.id) if s.applied]
    print(f"{done.name}: {done.phase}, from {done.launch_source} ({done.launch_note}); 95% of "
          f"best {done.best_samples_per_s} samples/s at {done.time_to_95_s} s, JCT "
          f"{done.measured_time_s} s (predicted {done.predicted_time_s} s: "
          f"{done.predicted_note})", file=sys.stderr)  # fmt: skip
    return {"job": done.name, "phase": done.phase, "error": done.error,
            "launch_source": done.launch_source, "launch_note": done.launch_note,
            "time_to_95_s": done.time_to_95_s, "best_samples_per_s": done.best_samples_per_s,
            "jct_s": done.measured_time_s, "core_h": done.measured_core_h,
            "predicted_time_s": done.predicted_time_s, "predicted_core_h": done.predicted_core_h,
            "predicted_note": done.predicted_note,
            "exactly_once": (done.accounting or {}).get("exactly_once"),
            "shapes": [{"time_s": s.time_s, "action": s.action, "reason": s.reason,
                        "shape": s.shape} for s in shapes]}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--policy", default="nearchus+")
    parser.add_argument("--timeout", type=float, default=1800.0, help="per run, seconds")
    parser.add_argument("--out", default="benchmarks/results/service_history.json")
    args = parser.parse_args(argv)
    result = {"benchmark": "service_history",
              "load_before": load_note(), "policy": args.policy, "epochs": args.epochs}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="rightsize-history-") as tmp:
        store = Store(str(Path(tmp) / "store.db"))
        allocator = Allocator(store, machine_resources(), Path(tmp) / "work", poll_s=0.5)
        allocator.start()
        try:
            runs = [run_once(allocator, store, job(args.epochs, args.policy), args.timeout)
                    for _ in range(2)]  # fmt: skip
        finally:
            allocator.stop()
            store.close()
    first, second = runs
    for run in runs:  # predicted against measured, as `rightsize job` shows them
        predicted, measured = run["predicted_time_s"], run["jct_s"]
        run["predicted_time_error"] = (predicted / measured - 1) if predicted and measured else None
    result.update(
        runs=runs,
        load_after=load_note(),
        second_reaches_95_sooner=(
            second["time_to_95_s"] is not None
            and first["time_to_95_s"] is not None
            and second["time_to_95_s"] < first["time_to_95_s"]
        ),
    )
    write_report(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
