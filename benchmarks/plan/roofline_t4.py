"""Roofline scaling against real GPU step times: this CPU's profile of ResNet-18 → one NVIDIA T4.

Pollux's artifact (petuum/adaptdl, osdi21-artifact) measured data-parallel
CIFAR-10 training with ResNet-18 on AWS g4dn.12xlarge (T4 GPUs); its
``placements.csv`` rows with placement ``1`` are one T4 alone, local batch 32 to
1024. Here ``resnet18-cifar`` (the same network: 3×3 stem, no max-pool) is
profiled on this CPU, scaled to the catalog's T4 by perf/roofline.py — method
``ratio`` (the planner's default) and ``absolute`` side by side — and the
predicted step time is compared with Pollux's measured one. This is the only
measured GPU reference available here; the data file is not part of a clone, so
the benchmark says so and exits when it is missing.

Usage:
    python benchmarks/plan/roofline_t4.py --data /work/shared/data/pollux_cifar10_placements.csv
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.lib.envelope import write_report
from benchmarks.lib.errors import rows_mape
from rightsize.core.catalog import load_catalog
from rightsize.perf.compute import ComputeModel
from rightsize.perf.roofline import DeviceRates, RooflineCompute
from rightsize.profiling.bmax import BmaxSearch
from rightsize.profiling.profile import Profile
from rightsize.profiling.profiler import Profiler, ProfilerSettings
from rightsize.workloads import WorkloadRegistry

METHODS = ("ratio", "absolute")


def single_gpu_rows(path: Path) -> list[tuple[int, float]]:
    """(local batch, measured step seconds) of the single-T4 placement."""
    with path.open() as f:
        return [
            (int(r["local_bsz"]), float(r["step_time"]))
            for r in csv.DictReader(f)
            if r["placement"] == "1"
        ]


def load_or_profile(path: Path, memory_limit: int, max_batch: int) -> Profile:
    if path.exists():
        return Profile.load(path)
    torch.set_num_threads(1)
    settings = ProfilerSettings(repeats=5, search=BmaxSearch(max_batch=max_batch), sampling="dense")
    workload = WorkloadRegistry().get("resnet18-cifar", "synthetic-cifar")
    profile = Profiler(torch.device("cpu"), settings).run(workload, memory_limit)
    profile.save(path)
    return profile


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", default="/work/shared/data/pollux_cifar10_placements.csv")
    parser.add_argument("--profile", default="benchmarks/results/profiles/resnet18-cifar-synthetic-cifar-cpu.json",
                        help="CPU profile of resnet18-cifar (measured and saved here when absent)")  # fmt: skip
    parser.add_argument(
        "--max-batch", type=int, default=128, help="largest batch profiled on the CPU"
    )
    parser.add_argument("--out", default="benchmarks/results/roofline_t4.json")
    args = parser.parse_args(argv)
    data = Path(args.data)
    if not data.exists():
        print(
            f"skipped: {data} not found (Pollux's measured T4 step times are not part of a clone)",
            file=sys.stderr,
        )
        return 0
    profile = load_or_profile(Path(args.profile), 2 * 2**30, args.max_batch)
    t4 = load_catalog("aws").get("g4dn.xlarge").accelerator
    measured = ComputeModel.from_profile(profile)
    source, target = DeviceRates.of_profile(profile), DeviceRates.of_accelerator(t4)
    models = {m: RooflineCompute(profile, measured, source, target, m) for m in METHODS}
    rows = []
    for batch, step_s in single_gpu_rows(data):
        predicted = {m: models[m].predict(batch).total_s for m in METHODS}
        rows.append(
            {"batch": batch, "measured_s": step_s, **{f"{m}_s": p for m, p in predicted.items()}}
        )
        errors = " ".join(
            f"{m} {100 * abs(p - step_s) / step_s:5.1f}%" for m, p in predicted.items()
        )
        print(f"batch {batch:5}: measured {step_s * 1e3:7.1f} ms  {errors}", file=sys.stderr)
    mape = {m: rows_mape(rows, f"{m}_s") for m in METHODS}
    report = {
        "benchmark": "roofline_t4",
        "source_device": {"name": profile.device.name, "flops_per_s": source.flops_per_s,
                          "mem_bytes_per_s": source.mem_bytes_per_s, "bmax": profile.bmax},
        "target": {"name": t4.name, "flops_per_s": target.flops_per_s, "mem_bytes_per_s": target.mem_bytes_per_s},
        "reference": "petuum/adaptdl osdi21-artifact simulator/traces/cifar10/placements.csv, placement 1",
        "rows": rows, "mape_percent": mape, "simulated": False,
    }  # fmt: skip
    write_report(args.out, report)
    print(json.dumps(mape, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
