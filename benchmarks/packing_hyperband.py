"""End to end on the paper's Table 3 space: original vs packed Hyperband (packing paper §5.4, Table 4).

Runs Hyperband (R = 81, eta = 3) over the 1,056 configurations of Table 3 with
the same seed, once per variant, and reports the wall time, the best
configuration found and the speedup over the original:

- ``original`` — no packing: every trial alone with plain PyTorch and
  ``torch.optim(fused=True)``, whose updates are bit-identical to a pack's;
- ``original-for-loop`` — the same with ``torch.optim``'s default (for-loop)
  implementation, what most training code runs;
- ``batch-size``, ``random``, ``knn`` — Packed Hyperband with the paper's three
  pack_opt strategies under the same memory limit (standing in for a device's
  memory; 40 MiB admits ~12 MLP-3 trials);
- ``knn+mix`` — kNN with trials that differ only in activation fused too
  (``--mix-activations``, beyond the paper).

Because packing never changes a trial's result, every packed variant must visit
the same configurations, measure the same losses and find the same best as
``original``; the script checks this and records it. Variants run in a
shuffled order per repetition; medians over repetitions are reported.

Usage:
    python benchmarks/packing_hyperband.py --out benchmarks/results/packing_hyperband_mlp3.json
    python benchmarks/packing_hyperband.py --workload small-cnn --dataset digits \\
        --out benchmarks/results/packing_hyperband_small_cnn.json
    python benchmarks/packing_hyperband.py --quick      # a smoke run, numbers meaningless
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

from packing_common import setup_process, write_report
from rightsize.core.units import parse_memory
from rightsize.packing.pack import PackSettings
from rightsize.packing.packopt import PackOptSettings
from rightsize.packing.runner import (
    TuneSettings,
    model_option_names,
    prepare_search,
    run_search,
    search_report,
)
from rightsize.packing.space import load_space
from rightsize.workloads.registry import WorkloadRegistry

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = {  # name -> (pack_opt strategy, how an unpacked trial is trained, mix activations)
    "original": ("none", "torch-fused", False),
    "original-for-loop": ("none", "torch-for-loop", False),
    "batch-size": ("batch-size", "torch-fused", False),
    "random": ("random", "torch-fused", False),
    "knn": ("knn", "torch-fused", False),
    "knn+mix": ("knn", "torch-fused", True),
}


def run_variant(name: str, args, registry: WorkloadRegistry, space) -> dict:
    strategy, engine, mix = VARIANTS[name]
    settings = TuneSettings(
        workload=args.workload, dataset=args.dataset, max_resource=args.max_resource, eta=args.eta,
        seed=args.seed, steps_per_unit=args.steps_per_unit,
        memory_limit_bytes=parse_memory(args.memory_limit, "--memory-limit"),
        packopt=PackOptSettings(strategy, args.threshold), unpacked_engine=engine,
        pack=PackSettings(mix_activations=mix),
    )  # fmt: skip
    search = prepare_search(settings, space, registry)
    cpu_start = time.process_time()
    report = search_report(search, run_search(search))
    # CPU seconds of this process: on a shared, oversubscribed machine wall time
    # includes waiting for a core; CPU time is closer to the work each variant does
    report["cpu_s"] = time.process_time() - cpu_start
    return report


def summarize(reports: dict[str, list[dict]]) -> dict:
    original = reports["original"][0]
    rows = {}
    for name, runs in reports.items():
        wall = statistics.median(r["wall_s"] for r in runs)
        first = runs[0]
        rows[name] = {
            "wall_s": wall,
            "walls_s": [r["wall_s"] for r in runs],
            "cpu_s": statistics.median(r["cpu_s"] for r in runs),
            "cpus_s": [r["cpu_s"] for r in runs],
            "best": first["best"],
            "same_best_as_original": all(_best(r) == _best(original) for r in runs),
            "same_losses_as_original": all(_losses(r) == _losses(original) for r in runs),
            "packs_per_rung": [len(r["packs"]) for r in first["rungs"]],
            "largest_pack_per_rung": [max(len(p) for p in r["packs"]) for r in first["rungs"]],
            "switch_s": sum(r["switch_s"] for r in first["rungs"]),
        }
    base, base_cpu = rows["original"]["wall_s"], rows["original"]["cpu_s"]
    loop = rows.get("original-for-loop")
    for row in rows.values():
        row["speedup_vs_original"] = base / row["wall_s"]
        row["cpu_speedup_vs_original"] = base_cpu / row["cpu_s"]
        if loop is not None:
            row["speedup_vs_original_for_loop"] = loop["wall_s"] / row["wall_s"]
            row["cpu_speedup_vs_original_for_loop"] = loop["cpu_s"] / row["cpu_s"]
    return rows


def _best(report: dict) -> tuple:
    return report["best"]["trial_id"], report["best"]["config"]


def _losses(report: dict) -> list[dict]:
    return [r["losses"] for r in report["rungs"]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workload", default="mlp3")
    parser.add_argument("--dataset", default="digits")
    parser.add_argument("--space", default=str(ROOT / "examples" / "spaces" / "table3.yaml"))
    parser.add_argument("--max-resource", type=float, default=81)
    parser.add_argument("--eta", type=float, default=3)
    parser.add_argument("--steps-per-unit", type=int, default=10)
    parser.add_argument("--memory-limit", default="40Mi", help="pack memory limit (default 40Mi)")
    parser.add_argument("--threshold", type=float, default=float("inf"), help="knn threshold")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--repeats", type=int, default=3, help="runs of each variant (medians kept)"
    )
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--allocator", choices=("retain", "default"), default="retain")
    parser.add_argument(
        "--quick", action="store_true", help="R=9, 2 steps per unit, 1 run: check it runs"
    )
    parser.add_argument("--out", default="benchmarks/results/packing_hyperband_mlp3.json")
    args = parser.parse_args(argv)
    if args.quick:
        args.max_resource, args.steps_per_unit, args.repeats = 9, 2, 1
    process = setup_process(args.threads, args.allocator)
    registry = WorkloadRegistry()
    space = load_space(args.space, model_option_names(registry, args.workload))
    names = args.variants.split(",")
    if "original" not in names:
        parser.error("--variants must include original (the reference)")
    reports: dict[str, list[dict]] = {name: [] for name in names}
    rng = random.Random(args.seed)
    for repeat in range(args.repeats):
        rng.shuffle(names)
        for name in names:
            report = run_variant(name, args, registry, space)
            reports[name].append(report)
            best = report["best"]
            print(
                f"run {repeat + 1}/{args.repeats} {name:18s} {report['wall_s']:7.1f}s "
                f"(cpu {report['cpu_s']:7.1f}s)  best {best['trial_id']} "
                f"loss {best['val_loss']:.5f} {best['config']}",
                file=sys.stderr,
                flush=True,
            )
    rows = summarize(reports)
    for name, row in rows.items():
        print(
            f"{name:18s} median {row['wall_s']:7.1f}s  speedup {row['speedup_vs_original']:.2f}x  "
            f"cpu {row['cpu_s']:7.1f}s  cpu speedup {row['cpu_speedup_vs_original']:.2f}x  "
            f"same best: {row['same_best_as_original']}  same losses: {row['same_losses_as_original']}",
            file=sys.stderr,
        )
    body = {
        "process": process,
        "settings": {k: v for k, v in vars(args).items() if k not in ("out",)},
        "space_size": space.size,
        "variants": rows,
        "reports": {name: runs[0] for name, runs in reports.items()},
    }
    write_report(args.out, "packing_hyperband", "packing_hyperband.py", argv, body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
