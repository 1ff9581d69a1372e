"""Finding the profiles a command plans with: given files, a saved profile, or a quick new one.

``--profile FILE`` (repeatable: one per device measured) wins. Otherwise the
workload's saved profile from ``rightsize profile`` (``profiles/W-DATASET-cpu.json``)
is used, and if there is none the workload is profiled now, quickly, on this
machine's CPU and saved there for next time. Before it starts, the command says that
it will profile, how long that takes at most (the profile's time budget,
profiling/budget.py) and where the profile goes: a plan that profiled silently for
12 minutes looked hung.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from rightsize.cli.args import forbid_together, parse_options
from rightsize.core.errors import SpecError
from rightsize.core.files import check_output_path
from rightsize.profiling.budget import DEFAULT_BUDGET_S
from rightsize.profiling.profile import Profile
from rightsize.profiling.settings import (
    QUICK_MEMORY_LIMIT,
    QUICK_REPEATS,
    QUICK_SEARCH,
    profile_file_name,
)

PROFILE_DIR = Path("profiles")


def default_profile_path(
    workload: str, dataset: str, device: str, options: dict | None = None
) -> Path:
    return PROFILE_DIR / profile_file_name(workload, dataset, device, options)


def add_profile_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--workload", help="zoo name or package.module:function (profiled if no saved profile)"
    )
    parser.add_argument("--dataset", help="dataset for --workload (default: the workload's own)")
    parser.add_argument(
        "--option", action="append", default=[], metavar="KEY=VALUE", help="model option"
    )
    parser.add_argument("--profile", action="append", default=[], metavar="FILE",
                        help="a saved profile (repeatable: measured profiles for other devices are used for them)")  # fmt: skip


def resolve_profiles(args: argparse.Namespace, progress: Callable[[str], None]) -> list[Profile]:
    """The profiles named, or the workload's saved or freshly measured one.

    Raises:
        SpecError: neither --profile nor --workload given, or both (with --dataset or
            --option, which describe --workload and would be ignored).
    """
    forbid_together(args, "profile", ["workload", "dataset", "option"],
                    "a profile names the workload it measured")  # fmt: skip
    if args.profile:
        return [Profile.load(path) for path in args.profile]
    # torch loads in seconds: only a command that resolves or measures a workload pays for it
    import torch

    from rightsize.profiling.profiler import Profiler, ProfilerSettings
    from rightsize.workloads.registry import WorkloadRegistry

    if not args.workload:
        raise SpecError("give --workload NAME or --profile FILE (from rightsize profile)")
    options = parse_options(args.option)
    workload = WorkloadRegistry().get(args.workload, args.dataset, options)
    path = default_profile_path(workload.name, workload.dataset.name, "cpu", options)
    if path.exists():
        progress(f"using the saved profile {path}")
        return [Profile.load(path)]
    check_output_path(path, "--workload (its profile is saved for next time)")
    settings = ProfilerSettings(repeats=QUICK_REPEATS, search=QUICK_SEARCH,
                                budget_s=DEFAULT_BUDGET_S)  # fmt: skip
    progress(will_profile(workload.label, path, settings.budget_s))
    profile = Profiler(torch.device("cpu"), settings, progress,
                       lambda line: progress(f"warning: {line}")).run(
        workload, QUICK_MEMORY_LIMIT
    )  # fmt: skip
    profile.save(path)
    progress(f"profile saved to {path}: the next plan of {workload.label} uses it")
    return [profile]


def will_profile(label: str, path: Path, budget_s: float | None) -> str:
    """What ``plan --workload`` says before it profiles: that it will, how long, where to."""
    limit = "no time limit" if budget_s is None else f"up to {budget_s:g} s"
    return (f"no saved profile of {label} at {path}: profiling it on this CPU first, {limit}, "
            f"and saving it there, so the next plan reuses it (`rightsize profile` measures "
            "more, with its own --budget-s)")  # fmt: skip
