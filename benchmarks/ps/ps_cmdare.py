"""The PS models against CM-DARE's measured clusters: the reserved independent check (issues 18, 40).

CM-DARE (Li, Walls, Guo, ICDCS 2020) trained CIFAR-10 ResNets with TensorFlow 1.10's
asynchronous parameter servers on Google Cloud: one PS VM of 4 vCPUs, 1-8 GPU workers (K80
or P100), batch 128 per worker (benchmarks/data/measured/README.md). Nothing in rightsize
was fitted, tuned or chosen on these rows; this only reads them at the end. Each curve is
predicted from what rightsize knows before any run, as ``plan --strategy ps`` predicts:

- a worker's step: the calibrated device model, per operation (perf/op_timing.py, the
  default since 2026-11-29; ``--device-model per-class``: perf/device_model.py) for the
  model's counted costs on that GPU at batch 128, fp32 — forward and backward (the PS applies
  the update);
- the PS's CPU per update: the optimizer step (SGD with momentum, Tensor2Tensor's default for
  these ResNets) over the model's parameters timed on this CPU, one thread; the PS's 4 vCPUs;
- the framework's PS costs, one named profile each (perf/ps_profiles.py): ``rightsize`` (this
  project's runtime, measured here: what the check used before profiles) and
  ``tensorflow1-grpc`` (TensorFlow 1.x's gRPC PS, from TensorFlow's published gRPC figures:
  a per-process transfer ceiling and a CPU cost per tensor, the tensors counted from the
  model's variables); the latter also at both ends of its published spread;
- links: Google Cloud's 2 Gbps per vCPU of the time (the PS 8 Gbps, a worker's 8 vCPUs 16).

It reports, per curve, profile and model (DLRover's eq. 1, the planner's default, and the
queueing model): the MAPE over 1-8 workers; the curve's shape error (each curve divided by its
own one-worker point, MAPE over 2-8 workers: the PS's part, apart from the device model's); the
knee (the first worker count whose next adds < 10%) measured and predicted; the one-worker error
(mostly the device model's); and the PS capacity each profile predicts beside the highest rate
measured. Per GPU it averages the curves.

    python benchmarks/ps/ps_cmdare.py --out benchmarks/results/ps_cmdare.json
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.lib.envelope import write_report
from benchmarks.plan import gpu_models
from benchmarks.plan import gpu_predictions as gp
from benchmarks.ps.ps_scaling import mape, saturation
from rightsize.core.catalog import find_accelerator
from rightsize.perf.device_model import DeviceModel, Efficiencies, GpuCompute
from rightsize.perf.op_timing import OpEfficiencies
from rightsize.perf.precision import Precision
from rightsize.perf.ps import PSModel, WorkerSpec, predict_ps, station_demands
from rightsize.perf.ps_profiles import (
    PROFILES,
    TENSORFLOW1_GRPC,
    TF1_GRPC_BYTES_PER_S_RANGE,
    TF1_GRPC_CPU_S_PER_TENSOR_RANGE,
    PSCostProfile,
    tf1_tensors_per_step,
)
from rightsize.profiling.tensor_counts import count_tensors

CMDARE = gp.DATA / "cmdare_ps_cifar10.csv"
BATCH = 128
PS_VCPUS = 4
GBPS_PER_VCPU = 2e9 / 8  # bytes/s
WORKER_VCPUS = 8
MODELS = ("resnet15-cifar", "resnet32-cifar")  # the ones gpu_models.py builds exactly
#: TensorFlow 1.x at the slow and the fast end of its published figures (perf/ps_profiles.py)
TF1_BOUNDS = {
    "slow": TENSORFLOW1_GRPC.bounded(TF1_GRPC_BYTES_PER_S_RANGE[0], TF1_GRPC_CPU_S_PER_TENSOR_RANGE[1]),
    "fast": TENSORFLOW1_GRPC.bounded(TF1_GRPC_BYTES_PER_S_RANGE[1], TF1_GRPC_CPU_S_PER_TENSOR_RANGE[0]),
}


def update_s(model: str, repeats: int = 50) -> float:
    """Median seconds of one SGD-with-momentum step over the model's parameters, one thread."""
    import torch

    torch.set_num_threads(1)
    net = gpu_models.BUILDERS[model](None).model
    for p in net.parameters():
        p.grad = torch.randn_like(p)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    optimizer.step()  # allocates the momentum buffers
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        optimizer.step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def variables(model: str) -> tuple[int, int]:
    """The model's trainable tensors and its batch-norm state tensors (moving mean and
    variance), as TensorFlow would hold them as variables on the PS: counted as profiles count
    them (profiling/tensor_counts.py), so the check and ``plan --ps-framework`` agree."""
    counts = count_tensors(gpu_models.BUILDERS[model](None).model)
    return counts.parameters, counts.state


def shape_error(predicted: dict[int, float], measured: dict[int, float]) -> float:
    """MAPE of the curves' shapes: each divided by its own one-worker point, over 2+ workers
    (what the PS model predicts, apart from how fast one worker steps)."""
    counts = [n for n in sorted(measured) if n > 1]
    return statistics.fmean(
        abs(predicted[n] / predicted[1] - measured[n] / measured[1]) / (measured[n] / measured[1])
        for n in counts
    )


def scored(predicted: dict[int, float], measured: dict[int, float], capacity: float,
           bottleneck: str) -> dict:  # fmt: skip
    return {"predicted": predicted, "mape": mape(predicted, measured),
            "shape_error": shape_error(predicted, measured),
            "one_worker_error": predicted[1] / measured[1] - 1,
            "knee_at": saturation(predicted), "ps_capacity_steps_per_s": capacity,
            "bottleneck_at_8": bottleneck}  # fmt: skip


def predicted_curve(worker: WorkerSpec, profile: PSCostProfile, update: float, tensors: int,
                    param_bytes: int, kind: PSModel, counts: list[int]) -> dict:  # fmt: skip
    """One profile's and one model's predicted steps/s at each worker count, the PS's capacity
    (steps/s its busiest station allows) and what limits the largest cluster."""
    ps = profile.spec(update_core_s=update, cores=PS_VCPUS,
                      link_bytes_per_s=PS_VCPUS * GBPS_PER_VCPU, tensors_per_step=tensors)  # fmt: skip
    runs = {n: predict_ps([worker] * n, ps, param_bytes, kind) for n in counts}
    busiest = max(station_demands([worker], ps, param_bytes, 1).values())
    curve = {n: r.steps_per_s for n, r in runs.items()}
    return {"curve": curve, "capacity": 1 / busiest, "bottleneck": runs[max(counts)].bottleneck}


def described(profile: PSCostProfile) -> dict:
    """The profile's fields for the report, no ceiling written as null (strict JSON)."""
    return {k: None if v == float("inf") else v for k, v in profile.__dict__.items()}


def per_gpu(entries: list[dict], key: str) -> dict[str, dict[str, float]]:
    """Each GPU's mean MAPE and shape error over its curves, for the profile-and-model ``key``."""
    out: dict[str, dict[str, float]] = {}
    for gpu in sorted({e["gpu"] for e in entries}):
        mine = [e["predictions"][key] for e in entries if e["gpu"] == gpu]
        out[gpu] = {"mape": statistics.fmean(m["mape"] for m in mine),
                    "shape_error": statistics.fmean(m["shape_error"] for m in mine)}  # fmt: skip
    return out


def curves() -> dict[tuple[str, str], dict[int, float]]:
    """Measured steps/s of each (model, GPU) with one PS (the authors' value per cluster size;
    the one-worker point measured twice is their sweep's, not the base set's)."""
    out: dict[tuple[str, str], dict[int, float]] = {}
    with CMDARE.open() as handle:
        for row in csv.DictReader(handle):
            if (row["model"] in MODELS and row["num_ps"] == "1"
                    and row["source_id"] == "cmdare_icdcs20"):  # fmt: skip
                out.setdefault((row["model"], row["gpu"]), {})[int(row["num_workers"])] = float(
                    row["steps_per_s"]
                )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--out", default="benchmarks/results/ps_cmdare.json")
    parser.add_argument("--device-model", choices=[m.value for m in DeviceModel],
                        default=DeviceModel.PER_OP.value,
                        help="the worker's step by operation (default, as plan) or by class")
    args = parser.parse_args(argv)
    per_op = args.device_model == DeviceModel.PER_OP.value
    eff, op_eff = Efficiencies.shipped(), OpEfficiencies.shipped()
    sheets = gp.load_sheets(gp.SHEETS)
    op_sheets = gp.load_op_sheets(gp.OP_SHEETS)
    profiles = {**PROFILES, **{f"tensorflow1-grpc-{end}": p for end, p in TF1_BOUNDS.items()}}
    result = {"benchmark": "ps_cmdare",
              "command": "python benchmarks/ps/ps_cmdare.py --out benchmarks/results/ps_cmdare.json",
              "device_model": args.device_model,
              "assumptions": {"batch": BATCH, "ps_vcpus": PS_VCPUS,
                              "ps_link_bytes_per_s": PS_VCPUS * GBPS_PER_VCPU,
                              "worker_link_bytes_per_s": WORKER_VCPUS * GBPS_PER_VCPU},
              "profiles": {name: described(p) for name, p in profiles.items()},
              "curves": []}  # fmt: skip
    updates: dict[str, float] = {}
    for (model, gpu), measured in sorted(curves().items()):
        if (model, "") not in sheets:
            print(f"counting {model}'s costs", file=sys.stderr)
            sheets[model, ""] = gp.counted_apart(model, "")
        sheet = sheets[model, ""]
        if model not in updates:
            updates[model] = update_s(model)
        trainable, state = variables(model)
        tensors = tf1_tensors_per_step(trainable, state)
        if per_op and (model, "") not in op_sheets:
            print(f"counting {model}'s operations", file=sys.stderr)
            op_sheets[model, ""] = gp.op_sheet_apart(model, "")
        ops = op_sheets[model, ""] if per_op else None
        step = GpuCompute(sheet, find_accelerator(gpu), Precision.FP32, eff, ops,
                          op_eff if per_op else None).step(BATCH)  # fmt: skip
        worker = WorkerSpec(BATCH, step.forward_s + step.backward_s, WORKER_VCPUS * GBPS_PER_VCPU)
        entry = {"model": model, "gpu": gpu, "param_bytes": sheet.param_bytes,
                 "trainable_tensors": trainable, "state_tensors": state,
                 "tf1_tensors_per_step": tensors,
                 "worker_compute_s": step.forward_s + step.backward_s,
                 "ps_update_s": updates[model], "measured": measured,
                 "measured_knee_at": saturation(measured),
                 "measured_max_steps_per_s": max(measured.values()), "predictions": {}}  # fmt: skip
        for name, profile in profiles.items():
            for kind in (PSModel.DLROVER, PSModel.QUEUEING):
                run = predicted_curve(worker, profile, updates[model], tensors,
                                      int(sheet.param_bytes), kind, sorted(measured))  # fmt: skip
                key = f"{name}/{kind.value}"
                entry["predictions"][key] = scored(run["curve"], measured, run["capacity"],
                                                   run["bottleneck"])  # fmt: skip
                got = entry["predictions"][key]
                print(f"{model} {gpu} {key}: MAPE {got['mape']:.1%}, shape {got['shape_error']:.1%}, "
                      f"knee {entry['measured_knee_at']} measured, {got['knee_at']} predicted, "
                      f"PS capacity {got['ps_capacity_steps_per_s']:.0f} steps/s "
                      f"(measured max {entry['measured_max_steps_per_s']:.0f} steps/s)",
                      file=sys.stderr)  # fmt: skip
        result["curves"].append(entry)
    keys = list(result["curves"][0]["predictions"])
    result["per_gpu"] = {key: per_gpu(result["curves"], key) for key in keys}
    gp.save_sheets(gp.SHEETS, sheets)
    gp.save_op_sheets(gp.OP_SHEETS, op_sheets)
    write_report(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
