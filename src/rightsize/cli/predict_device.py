"""``rightsize predict PROFILE --device GPU`` (or ``--instance CLOUD:TYPE``): a step on a GPU.

The question users ask first — how fast will this train on an A100 at batch 640 —
answered by the calibrated device model (perf/device_model.py) from the
profile's counted costs: step time, samples per second, whether the batch fits
the GPU's memory, the interval the held-out errors give, and what bounds each
part of the step.
"""

from __future__ import annotations

import argparse
import math

from rightsize.cli.output import format_table
from rightsize.core.catalog import Accelerator, InstanceType, find_accelerator, load_catalog
from rightsize.core.errors import SpecError
from rightsize.core.units import format_duration
from rightsize.perf.device_model import DeviceModel, GpuCompute
from rightsize.perf.precision import Precision, describe
from rightsize.planning.options import bmax_on
from rightsize.planning.precision_terms import PrecisionStatement, precision_statement
from rightsize.profiling.profile import Profile


def add_device_arguments(parser: argparse.ArgumentParser) -> None:
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--device", metavar="GPU",
                        help="predict on this GPU (a name in `rightsize catalog --accelerators`)")
    target.add_argument("--instance", metavar="CLOUD:TYPE",
                        help="predict on this cloud instance's GPUs, e.g. gcp:a2-ultragpu-1g")
    parser.add_argument("--precision", choices=[p.value for p in Precision],
                        default=Precision.PYTORCH.value,
                        help="fp32, tf32, amp (mixed fp16/bf16), or pytorch (default: what "
                        "PyTorch does unasked: TF32 convolutions on Ampere and later, fp32 "
                        "matmuls); needs --device or --instance")  # fmt: skip
    parser.add_argument("--device-model", choices=[m.value for m in DeviceModel],
                        default=DeviceModel.PER_OP.value,
                        help="per-op (default: each operation the step dispatches, timed by "
                        "its shape) or per-class (one calibrated efficiency per operation "
                        "class); needs --device or --instance")  # fmt: skip


def resolve_target(args: argparse.Namespace) -> tuple[Accelerator, InstanceType | None]:
    """The GPU (and instance) named on the command line.

    Raises:
        SpecError: a malformed --instance, or an instance without GPUs.
        UnknownNameError: an unknown GPU, cloud or instance type.
    """
    if args.device:
        return find_accelerator(args.device), None
    cloud, sep, name = args.instance.partition(":")
    if not sep or not cloud or not name:
        raise SpecError(f"--instance {args.instance!r}: write CLOUD:TYPE, e.g. gcp:a2-ultragpu-1g")
    instance = load_catalog(cloud).get(name)
    if instance.accelerator is None:
        raise SpecError(f"--instance {args.instance}: {name} has no GPU; the device model "
                        "predicts GPUs (use `rightsize plan` for CPU instances)")  # fmt: skip
    return instance.accelerator, instance


def device_report(profile: Profile, acc: Accelerator, precision: Precision,
                  batches: list[int], instance: InstanceType | None = None,
                  method: DeviceModel = DeviceModel.PER_OP) -> dict:  # fmt: skip
    """Predicted step time per batch on ``acc``, as a JSON-ready dict."""
    compute = GpuCompute.of(profile, acc, precision, method=method)
    memory_bytes = int(acc.memory_gib * 2**30)
    fits_up_to = bmax_on(profile, memory_bytes, activation_factor=precision.activation_bytes_factor)
    devices = instance.accelerator_count if instance else 1
    rows = []
    for batch in batches:
        step = compute.step(batch)
        low, high = compute.interval(step.total_s)
        rows.append({
            "batch": batch, "forward_s": step.forward_s, "backward_s": step.backward_s,
            "optimizer_s": step.optimizer_s, "step_s": step.total_s,
            "step_s_interval": [low, high], "samples_per_s": batch / step.total_s,
            "samples_per_s_interval": [batch / high, batch / low],
            "instance_samples_per_s": devices * batch / step.total_s,
            "fits_memory": batch <= fits_up_to, "by_class_s": dict(step.by_class_s),
        })  # fmt: skip
    eff = compute.op_efficiencies if compute.op_efficiencies is not None else compute.efficiencies
    kind = {DeviceModel.PER_CLASS: "calibrated per-operation-class roofline (perf/device_model.py)",
            DeviceModel.PER_OP: "each dispatched operation timed by its shape (perf/op_timing.py)"}
    return {
        "device": acc.name,
        "instance": f"{instance.cloud}:{instance.name}" if instance else None,
        "devices_per_instance": devices,
        "precision": precision.value,
        "precision_means": describe(precision, acc),
        "precision_assumed": precision_statement(precision, [acc]).to_dict(),
        "largest_batch_that_fits": fits_up_to,
        "model": {
            "method": compute.method.value, "kind": kind[compute.method],
            "from": "the profile's counted FLOPs and bytes, the GPU's datasheet peaks",
            "calibration": eff.source, "held_out_errors": dict(eff.held_out),
            "interval": f"x/÷ {math.exp(eff.log_spread):.2f} (80% of held-out errors)",
        },
        "predictions": rows,
    }  # fmt: skip


def print_device_report(profile: Profile, report: dict) -> None:
    where = report["instance"] or report["device"]
    print(f"{profile.workload} on {where}: {report['precision_means']}")
    assumed = report["precision_assumed"]
    print(PrecisionStatement(Precision(assumed["precision"]), assumed["assumes"]).line())
    print(f"model: {report['model']['kind']}; interval {report['model']['interval']}")
    if report["model"]["calibration"]:
        print(f"calibrated on: {report['model']['calibration']}")
    print(f"largest batch that fits {report['device']}'s memory: "
          f"{report['largest_batch_that_fits']}")  # fmt: skip
    print()
    rows = []
    for p in report["predictions"]:
        low, high = p["samples_per_s_interval"]
        rows.append([p["batch"], format_duration(p["step_s"]), f"{p['samples_per_s']:.1f}",
                     f"{low:.0f}-{high:.0f}", "yes" if p["fits_memory"] else "NO",
                     max(p["by_class_s"], key=p["by_class_s"].get)])  # fmt: skip
    print(format_table(["batch", "step", "samples/s", "interval", "fits", "most time in"], rows))
    if report["devices_per_instance"] > 1:
        print(f"\n{report['instance']} has {report['devices_per_instance']} GPUs: "
              "instance samples/s is that many times one GPU's, before synchronisation "
              "(rightsize plan models it)")  # fmt: skip
