"""``rightsize predict``: the compute model of a saved profile and its predicted step times."""

from __future__ import annotations

import argparse

from rightsize.cli.args import parse_count_list
from rightsize.cli.output import format_table, print_json
from rightsize.cli.predict_device import (
    add_device_arguments,
    device_report,
    print_device_report,
    resolve_target,
)
from rightsize.core.errors import SpecError
from rightsize.core.units import format_duration
from rightsize.perf.compute import METHODS, ComputeModel
from rightsize.perf.device_model import DeviceModel
from rightsize.perf.precision import Precision
from rightsize.profiling.profile import Profile


def register(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Fit Srift's piecewise-linear compute model (§4.1) to a saved profile and "
        "predict forward, backward and total time per training step at given batch sizes. "
        "With --device or --instance, predict a GPU's step instead, from the profile's "
        "counted costs and the GPU's datasheet at --precision (the calibrated device model)."
    )
    parser.add_argument("profile", help="a profile JSON written by `rightsize profile`")
    parser.add_argument(
        "--batches",
        default="",
        metavar="B1,B2",
        help="batch sizes to predict (default powers of two up to B_max); any positive "
        "whole number",
    )
    parser.add_argument("--batch", type=int, metavar="B", help="one batch size (per device)")
    add_device_arguments(parser)
    parser.add_argument(
        "--method",
        choices=METHODS,
        default="auto",
        help="srift: Srift's 4 samples; dense: every measured sample; auto (default): dense "
        "when the profile has more than Srift's samples",
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(run=run)  # fmt: skip


def default_batches(bmax: int, min_batch: int = 1) -> list[int]:
    """Powers of two from the smallest trainable batch up to B_max, and B_max itself."""
    batches, b = [], min_batch
    while b < bmax:
        batches.append(b)
        b *= 2
    return batches + [bmax]


def prediction_report(
    profile: Profile, batches: list[int] | None = None, method: str = "auto"
) -> dict:
    model = ComputeModel.from_profile(profile, method)
    segments = [
        {
            "from_batch": model.total.xs[i],
            "to_batch": model.total.xs[i + 1],
            "alpha_s_per_sample": model.total.slope_intercept(i)[0],
            "beta_s": model.total.slope_intercept(i)[1],
        }
        for i in range(model.total.segments)
    ]
    predictions = []
    for batch in batches or default_batches(profile.bmax, profile.min_batch):
        time = model.predict(batch)
        predictions.append({
            "batch": batch,
            "forward_s": time.forward_s,
            "backward_s": time.backward_s,
            "total_s": time.total_s,
            "samples_per_s": batch / time.total_s if time.total_s > 0 else None,
            "extrapolated": batch > profile.bmax,  # beyond what fit in the profiled memory
        })  # fmt: skip
    return {
        "compute_model": {"method": model.method, "segments": segments},
        "predictions": predictions,
        "warnings": prediction_warnings(profile, predictions),
    }


def prediction_warnings(profile: Profile, predictions: list[dict]) -> list[str]:
    """Extrapolation past B_max, and the timing problems the profile recorded."""
    beyond = [str(p["batch"]) for p in predictions if p["extrapolated"]]
    lines = []
    if beyond:
        lines.append(
            f"batch {', '.join(beyond)} is above the profile's B_max {profile.bmax} (limited by "
            f"{profile.bmax_limited_by}): extrapolated, never measured"
            + (", and it may not fit in memory" if profile.bmax_limited_by == "memory" else "")
        )
    return lines + profile.timing_warnings()


def print_prediction_report(report: dict) -> None:
    model = report["compute_model"]
    print(f"compute model ({model['method']}): t(B) = alpha*B + beta per segment")
    for seg in model["segments"]:
        print(f"  B in [{seg['from_batch']:g}, {seg['to_batch']:g}]: "
              f"alpha = {format_duration(seg['alpha_s_per_sample'])}/sample, "
              f"beta = {format_duration(seg['beta_s'])}")  # fmt: skip
    print()
    print(format_table(
        ["batch", "forward", "backward", "fwd+bwd", "samples/s"],
        [[f"{p['batch']}*" if p["extrapolated"] else p["batch"], format_duration(p["forward_s"]),
          format_duration(p["backward_s"]), format_duration(p["total_s"]),
          f"{p['samples_per_s']:.1f}"] for p in report["predictions"]],
    ))  # fmt: skip
    for line in report["warnings"]:
        print(f"warning: {line}" + (" (* in the table)" if line.startswith("batch ") else ""))


def run(args: argparse.Namespace) -> int:
    batches = parse_count_list(args.batches, "--batches") or None
    if args.batch is not None:
        if args.batch < 1:
            raise SpecError(f"--batch must be a positive whole number, got {args.batch}")
        batches = [*(batches or []), args.batch]
    on_gpu = bool(args.device or args.instance)
    if not on_gpu and args.precision != Precision.PYTORCH.value:
        raise SpecError("--precision applies to a GPU: add --device or --instance")
    if not on_gpu and args.device_model != DeviceModel.PER_OP.value:
        raise SpecError("--device-model applies to a GPU: add --device or --instance")
    target = resolve_target(args) if on_gpu else None  # bad names fail before the profile loads
    profile = Profile.load(args.profile)
    if target is not None:
        acc, instance = target
        report = device_report(profile, acc, Precision(args.precision),
                               batches or default_batches(profile.bmax, profile.min_batch),
                               instance, DeviceModel(args.device_model))  # fmt: skip
        if args.json:
            print_json({"profile": args.profile, "workload": profile.workload, **report})
        else:
            print_device_report(profile, report)
        return 0
    report = prediction_report(profile, batches, args.method)
    if args.json:
        print_json({"profile": args.profile, "workload": profile.workload, **report})
    else:
        print(f"{profile.workload} on {profile.dataset} ({profile.device.name})")
        print_prediction_report(report)
    return 0
