"""GPU predictions from two CPU profiles of the same model taken minutes apart (issue 18 item 3).

This machine is shared: the same profile taken twice gave a GPU 124 or 616
images/s by the ratio method, which scales the measured CPU time. The device
model (perf/device_model.py) reads only what the profile counts — FLOPs, bytes,
operation classes, the memory line — so its predictions should not move. This
profiles ``--workload`` ``--times`` times, ``--gap-s`` apart, then predicts
samples/s on each GPU at ``--batch`` from every profile by both methods and
reports the largest relative difference between profiles per GPU and method
(goal: ≤ 5% for the default method).

    python benchmarks/plan/profile_noise.py --out benchmarks/results/profile_noise.json
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.lib.envelope import write_report
from benchmarks.lib.load import load_note
from rightsize.core.catalog import find_accelerator
from rightsize.perf.compute import ComputeModel
from rightsize.perf.device_model import GpuCompute
from rightsize.perf.precision import Precision
from rightsize.perf.roofline import DeviceRates, RooflineCompute
from rightsize.profiling.bmax import BmaxSearch
from rightsize.profiling.profiler import Profiler, ProfilerSettings
from rightsize.workloads.registry import WorkloadRegistry

GPUS = ("K80", "T4", "V100", "A100", "H100")


def predictions(profile, batch: int) -> dict:
    out = {}
    for name in GPUS:
        acc = find_accelerator(name)
        calibrated = GpuCompute.of(profile, acc, Precision.PYTORCH).predict(batch).total_s
        ratio = RooflineCompute(profile, ComputeModel.from_profile(profile),
                                DeviceRates.of_profile(profile), DeviceRates.of_accelerator(acc),
                                "ratio").predict(batch).total_s  # fmt: skip
        out[name] = {"calibrated": batch / calibrated, "ratio": batch / ratio}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", default="resnet18-cifar")
    parser.add_argument("--times", type=int, default=3)
    parser.add_argument("--gap-s", type=float, default=120.0)
    parser.add_argument("--max-batch", type=int, default=64)
    parser.add_argument("--batch", type=int, default=256, help="per-GPU batch to predict")
    parser.add_argument("--out", default="benchmarks/results/profile_noise.json")
    args = parser.parse_args(argv)
    if args.times < 2:
        print("error: --times must be at least 2 to compare profiles", file=sys.stderr)
        return 2
    workload = WorkloadRegistry().get(args.workload)
    settings = ProfilerSettings(repeats=3, search=BmaxSearch(max_batch=args.max_batch), sampling="dense")
    runs = []
    for i in range(args.times):
        if i:
            time.sleep(args.gap_s)
        load = load_note()
        profile = Profiler(torch.device("cpu"), settings, lambda _m: None).run(workload, 4 * 2**30)
        runs.append({"load": load, "peak_flops_per_s": profile.device.peak_flops_per_s,
                     "step_s_at_bmax": profile.samples[-1].total_s,
                     "predictions": predictions(profile, args.batch)})  # fmt: skip
        print(f"profile {i + 1}: load {load['loadavg_1m']:.2f}", file=sys.stderr)
    spread = {}
    for name in GPUS:
        spread[name] = {}
        for method in ("calibrated", "ratio"):
            values = [r["predictions"][name][method] for r in runs]
            spread[name][method] = max(values) / min(values) - 1
    worst = {m: max(spread[g][m] for g in GPUS) for m in ("calibrated", "ratio")}
    write_report(args.out, {
        "benchmark": "profile_noise",
        "workload": args.workload, "batch": args.batch, "runs": runs,
        "max_relative_difference": spread, "worst": worst,
    })  # fmt: skip
    print(f"largest difference between profiles: calibrated {worst['calibrated']:.1%}, "
          f"ratio {worst['ratio']:.1%}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
