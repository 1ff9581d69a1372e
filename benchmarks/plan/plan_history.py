"""`plan` with the measured speed of past runs against `plan` from the profile alone.

Issue 19 item 4: "`plan` uses the measured throughput of past runs on the same host or
instance type where it has them". This host (2 cores) is declared a ``c5.large`` (2
vCPUs) — the declaration a user on a cloud VM makes with ``--instance-type``. The
script

1. profiles the workload here (``rightsize profile``, as ``plan --workload`` would);
2. runs the same allreduce job for real at several batches and shapes
   (``rightsize run --instance-type c5.large --database STORE``), each into the store;
3. for each run held out in turn, asks ``rightsize plan`` (as a user would: the CLI,
   ``--json``) for one c5.large at that run's samples per step, with a store of the
   *other* runs (each ``--history-fit``: ``interpolate`` and ``scale``) and with
   ``--no-history``, and compares the predicted samples/s with what the held-out run
   measured (its steady median, the same number the store keeps).

The held-out run is never in the store the plan reads. Usage:

    python benchmarks/plan/plan_history.py --out benchmarks/results/plan_history.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.lib.envelope import write_report
from benchmarks.lib.load import load_note
from rightsize.service.history import measured_speeds
from rightsize.service.store import Store

INSTANCE = "c5.large"
WORKLOAD, DATASET = "small-cnn", "synthetic-cifar"
#: (batch per worker, workers, cores each): batches and shapes the plan must carry between
RUNS = ((64, 2, 1.0), (128, 2, 1.0), (32, 2, 1.0), (64, 1, 2.0), (128, 1, 2.0))
METHODS = ("interpolate", "scale", "profile")
SAMPLES = 24_576  # per run: about 40-60 s here at these batches


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rightsize", *args], capture_output=True,
                          text=True, check=True)  # fmt: skip


def job_file(directory: Path, batch: int, workers: int, cores: float) -> Path:
    name = f"b{batch}-w{workers}"
    data = {"name": name, "workload": WORKLOAD, "dataset": DATASET, "dataset_size": SAMPLES // 2,
            "batch_size": batch, "epochs": 2, "strategy": "allreduce",
            "budget": {"cpu": 2, "memory": "6Gi"},
            "initial_shape": {"workers": {"count": workers, "cpu": cores, "memory": "2Gi"}},
            "checkpoint": {"dir": str(directory / name), "interval": "600s"},
            "training": {"optimizer": "sgd", "lr": 0.05, "momentum": 0.9},
            "runtime": {"metric_interval": "2s"}}  # fmt: skip
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def without(store: Path, name: str, into: Path) -> Path:
    """A copy of ``store`` without the run ``name`` (and its rows)."""
    shutil.copy(store, into)
    with sqlite3.connect(into) as db:
        db.execute("PRAGMA foreign_keys = ON")
        db.execute("DELETE FROM jobs WHERE name = ?", (name,))
    return into


def planned_speed(profile: Path, vm_batch: int, *extra: str) -> tuple[float, str]:
    out = cli("plan", "--profile", str(profile), "--global-batch", str(vm_batch),
              "--iterations", "100", "--instances", f"{INSTANCE}:1", "--quiet", "--json",
              *extra).stdout  # fmt: skip
    plan = next(p for p in json.loads(out) if p["policy"] == "srift")
    return vm_batch / plan["seconds_per_iter"], plan["models"][INSTANCE]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="benchmarks/results/plan_history.json")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="plan-history-"))
    store_path = work / "runs.db"
    profile = work / "profile.json"
    started = time.time()
    # batches up to 512 cover every run (at most 256 samples per step)
    cli("profile", WORKLOAD, "--dataset", DATASET, "--max-batch", "512", "--repeats", "3",
        "--out", str(profile), "--quiet")
    print(f"profiled {WORKLOAD} in {time.time() - started:.0f} s", file=sys.stderr)
    for batch, workers, cores in RUNS:
        t0 = time.time()
        cli("run", str(job_file(work, batch, workers, cores)), "--instance-type", INSTANCE,
            "--database", str(store_path), "--quiet", "--json")  # fmt: skip
        print(f"ran b{batch}-w{workers} in {time.time() - t0:.0f} s", file=sys.stderr)
    store = Store(str(store_path))
    measured = {s.run: s for s in measured_speeds(store, WORKLOAD, DATASET, {}, "allreduce")}
    store.close()
    rows = []
    for name, truth in sorted(measured.items()):
        others = without(store_path, name, work / f"without-{name}.db")
        row = {"held_out": name, "vm_batch": truth.vm_batch, "cores": truth.cores,
               "measured_samples_per_s": truth.samples_per_s}  # fmt: skip
        for key, extra in (("interpolate", ("--database", str(others))),
                           ("scale", ("--database", str(others), "--history-fit", "scale")),
                           ("profile", ("--no-history",))):  # fmt: skip
            speed, models = planned_speed(profile, truth.vm_batch, *extra)
            row.update({f"{key}_samples_per_s": speed, f"{key}_model": models,
                        f"{key}_error": speed / truth.samples_per_s - 1})  # fmt: skip
        rows.append(row)
        print(f"{name}: measured {truth.samples_per_s:.0f}; " + ", ".join(
            f"{key} {row[f'{key}_samples_per_s']:.0f} ({row[f'{key}_error']:+.1%})"
            for key in METHODS), file=sys.stderr)  # fmt: skip
    summary = {key: statistics.median(abs(r[f"{key}_error"]) for r in rows) for key in METHODS}
    report = {"benchmark": "plan_history", "instance_declared": INSTANCE, "workload": WORKLOAD,
              "runs": [dict(zip(("batch", "workers", "cores"), r, strict=True)) for r in RUNS],
              "samples_per_run": SAMPLES, "rows": rows,
              "median_abs_error": summary, "wall_s": time.time() - started,
              "note": load_note()}  # fmt: skip
    print("median |error|: " + ", ".join(f"{k} {v:.1%}" for k, v in summary.items()),
          file=sys.stderr)
    write_report(args.out, report)
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
