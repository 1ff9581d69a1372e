"""``rightsize profile``: measure a workload on this machine's device and save its Profile."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from rightsize.cli.args import bounded, parse_count_list, parse_options
from rightsize.cli.output import print_json, progress_printer, warning_printer
from rightsize.cli.predict_cmd import prediction_report, print_prediction_report
from rightsize.cli.profiles import default_profile_path
from rightsize.core.errors import SpecError
from rightsize.core.files import check_output_path
from rightsize.core.limits import BATCH, REPEATS, SEED, THREADS, WARMUP
from rightsize.core.units import format_bytes, format_duration, parse_duration, parse_memory
from rightsize.profiling.bmax import BmaxSearch
from rightsize.profiling.bound import DEFAULT_CPU_MAX_STEP_S, DEFAULT_CPU_MEMORY_FRACTION
from rightsize.profiling.budget import DEFAULT_BUDGET_S, announce
from rightsize.profiling.profile import SAMPLINGS, Profile
from rightsize.profiling.settings import ProfilerSettings

if TYPE_CHECKING:
    import torch


def register(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Measure a workload on a real device (Srift §4.1): binary-search the largest "
        "batch whose training step fits in memory, time forward and backward at batch 1, "
        "B_max/3, 2·B_max/3 and B_max, record each layer's gradient-ready time, and write a "
        "versioned JSON profile. Prints the fitted compute model and predicted step times."
    )
    parser.add_argument(
        "workload", help="zoo name (see `rightsize workloads`) or package.module:function"
    )
    parser.add_argument("--dataset", help="dataset name (default: the workload's own)")
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="model option, e.g. activation=tanh (repeatable)",
    )
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    parser.add_argument(
        "--memory-limit",
        metavar="SIZE",
        help="on a CPU: the most this process may hold resident, interpreter included, enforced "
        f"on every probe (default {DEFAULT_CPU_MEMORY_FRACTION:.0%}% of the free memory); on a "
        "GPU: the device memory to search B_max under. E.g. 8Gi",
    )
    parser.add_argument(
        "--max-batch",
        type=bounded(BATCH),
        default=BmaxSearch.max_batch,
        help="largest batch the search tries (default %(default)s)",
    )
    parser.add_argument(
        "--max-step-time",
        metavar="DURATION",
        help="B_max stops where one training step would take longer, e.g. 30s, or none "
        f"(default {DEFAULT_CPU_MAX_STEP_S:g}s on a CPU, none on a GPU)",
    )
    parser.add_argument(
        "--budget-s",
        metavar="SECONDS",
        help="the whole profile's time budget: the B_max search's step bound, the timing "
        "rounds, re-timings and gradient-ready passes are cut to fit it, and what was cut is "
        f"said; none for no budget (default {DEFAULT_BUDGET_S:g})",
    )
    parser.add_argument(
        "--warmup",
        type=bounded(WARMUP),
        default=ProfilerSettings.warmup,
        help="untimed steps per batch (default %(default)s)",
    )
    parser.add_argument(
        "--repeats",
        type=bounded(REPEATS),
        default=ProfilerSettings.repeats,
        help="timed rounds, each one step of every sampled batch; medians are kept "
        "(default %(default)s)",
    )
    parser.add_argument(
        "--sampling",
        choices=SAMPLINGS,
        default=ProfilerSettings.sampling,
        help="batches to time: srift = 1, B_max/3, 2*B_max/3, B_max; dense = those and the "
        "powers of two between them (default %(default)s)",
    )
    parser.add_argument(
        "--extra-batches", default="", metavar="B1,B2", help="time these batch sizes too"
    )
    parser.add_argument(
        "--threads",
        type=bounded(THREADS),
        metavar="N",
        help="torch intra-op threads while profiling (default: torch's, one per core)",
    )
    parser.add_argument(
        "--seed", type=bounded(SEED), default=0, help="model and data seed (default 0)"
    )
    parser.add_argument(
        "--out",
        metavar="FILE",
        help="where to write the profile (default profiles/WORKLOAD-DATASET-DEVICE.json)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the profile and predictions as JSON"
    )
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="no progress or warnings on stderr (--json: no progress)",
    )
    parser.set_defaults(run=run)  # fmt: skip


def run(args: argparse.Namespace) -> int:
    # imported here: torch takes 2-3 s to load, which `profile --help` need not wait for
    import torch

    from rightsize.profiling.device import resolve_device
    from rightsize.profiling.profiler import Profiler
    from rightsize.workloads.registry import WorkloadRegistry

    device = resolve_device(args.device)
    limit = memory_limit(args.memory_limit, device)
    settings = ProfilerSettings(
        warmup=args.warmup,
        repeats=args.repeats,
        search=BmaxSearch(
            max_batch=args.max_batch, max_step_s=max_step_time(args.max_step_time, device)
        ),
        sampling=args.sampling,
        extra_batches=tuple(parse_count_list(args.extra_batches, "--extra-batches")),
        budget_s=budget_seconds(args.budget_s),
        seed=args.seed,
    )
    options = parse_options(args.option)
    workload = WorkloadRegistry().get(args.workload, args.dataset, options, seed=args.seed)
    out = check_output_path(
        args.out
        or default_profile_path(workload.name, workload.dataset.name, device.type, options),
        "--out",
    )  # before measuring: a path that cannot be written would lose the profile
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    progress = progress_printer(args.quiet or args.json)
    progress(announce(f"{workload.label} on {device}", settings.budget_s, settings.sampling,
                      settings.extra_batches, settings.repeats))  # fmt: skip
    profiler = Profiler(device, settings, progress, warning_printer(args.quiet))
    if device.type == "cpu":  # the limit bounds the process (profiling/bound.py)
        profile = profiler.run(workload, process_limit_bytes=limit)
    else:
        profile = profiler.run(workload, memory_limit_bytes=limit)
    profile.save(out)
    report = prediction_report(profile)
    if args.json:
        print_json(
            {"profile_path": str(out), "profile": profile.model_dump(by_alias=True), **report}
        )
        return 0
    print_summary(profile)
    print()
    print_prediction_report(report)
    print(f"\nprofile written to {out}")
    return 0


def memory_limit(text: str | None, device: torch.device) -> int | None:
    """``--memory-limit`` in bytes (None: the device's), checked against the device."""
    if text is None:
        return None
    from rightsize.profiling.device import check_memory_limit  # torch: see run

    return check_memory_limit(parse_memory(text, "--memory-limit"), device, "--memory-limit")


def max_step_time(text: str | None, device: torch.device) -> float | None:
    """``--max-step-time`` in seconds: ``none`` for no bound; by default a bound on a CPU only."""
    if text is None:
        return DEFAULT_CPU_MAX_STEP_S if device.type == "cpu" else None
    if text.strip().lower() == "none":
        return None
    seconds = parse_duration(text, "--max-step-time")
    if not seconds > 0:
        raise SpecError(f"--max-step-time {text!r}: must be above 0, or none for no bound")
    return seconds


def budget_seconds(text: str | None) -> float | None:
    """``--budget-s`` in seconds: ``none`` for no budget; by default DEFAULT_BUDGET_S."""
    if text is None:
        return DEFAULT_BUDGET_S
    if text.strip().lower() == "none":
        return None
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not seconds > 0 or seconds == float("inf"):
        raise SpecError(f"--budget-s {text!r}: give seconds above 0, e.g. 90, or none")
    return seconds


def print_summary(profile: Profile) -> None:
    memory = profile.memory
    print(
        f"{profile.workload} on {profile.dataset} — {profile.device.kind}: {profile.device.name} "
        f"({profile.device.threads} threads)"
    )
    print(
        f"  parameters       {sum(layer.param_count for layer in profile.layers):,} "
        f"in {len(profile.layers)} layers ({format_bytes(profile.param_bytes)})"
    )
    process = (
        f", process bound {format_bytes(memory.process_limit_bytes)}"
        if memory.process_limit_bytes is not None
        else ""
    )
    print(
        f"  B_max            {profile.bmax} (limited by {profile.bmax_limited_by}; step limit "
        f"{format_bytes(memory.limit_bytes)} from {memory.limit_source}{process})"
    )
    print(
        f"  resident memory  {format_bytes(memory.resident_bytes)}; activations "
        f"{format_bytes(memory.activation_bytes_per_sample)} per sample"
    )
    print(f"  latency spread   {profile.compute_cv:.1%} (median std/mean of fwd+bwd)")
    budget = profile.settings.get("budget")
    if budget:
        cuts = f"; cut: {'; '.join(budget['cuts'])}" if budget["cuts"] else ", nothing cut"
        print(f"  time             {format_duration(budget['spent_s'])} of the "
              f"{format_duration(budget['seconds'])} budget{cuts}")  # fmt: skip
    print("  measured         " + "; ".join(
        f"B={s.batch}: fwd {format_duration(s.forward_s)} bwd {format_duration(s.backward_s)}"
        for s in profile.samples))  # fmt: skip
