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
  (``--mix-activations``, beyond the paper);
- beyond the paper: ``knn-ragged`` (``--batch-mode ragged``: no padded rows),
  ``knn-concurrent`` (``--concurrent-brackets``: brackets side by side, packed
  across), both together, with mixed activations, and
  ``knn-ragged-concurrent-for-loop`` with torch.optim's default kernels; ragged
  groups compute gradients with the direct step (``--backward direct``), and the
  ``-autograd`` variants run the same search through the autograd engine.

Every variant runs at every ``--threads`` count (default 1 and 2), in a shuffled
order per repetition; medians over repetitions are reported. Because packing
never changes a trial's result, every packed variant must visit the same
configurations, measure the same losses and find the same best as its
*reference*: ``original`` for the fused-kernel variants, ``original-for-loop``
for the for-loop one; the script checks and records it. Speedups are wall-time
ratios: at the same thread count, and against the reference at its best thread
count; the ``headline`` is the reference at its best thread count against the
fastest packed variant that agrees with it.

Usage:
    python benchmarks/tune/packing_hyperband.py --out benchmarks/results/packing_hyperband_mlp3.json
    python benchmarks/tune/packing_hyperband.py --workload small-cnn --dataset digits \\
        --out benchmarks/results/packing_hyperband_small_cnn.json
    python benchmarks/tune/packing_hyperband.py --quick      # a smoke run, numbers meaningless
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.lib.load import load_note
from benchmarks.lib.repeats import shuffled_rounds
from benchmarks.tune.packing_common import setup_process, write_report
from rightsize.core.units import parse_memory
from rightsize.packing.pack import PackSettings
from rightsize.packing.packopt import PackOptSettings
from rightsize.packing.probe import ProbeSettings
from rightsize.packing.runner import (
    TuneSettings,
    model_option_names,
    prepare_search,
    run_search,
    search_report,
)
from rightsize.packing.space import load_space
from rightsize.workloads.registry import WorkloadRegistry

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Variant:
    """One way to run the search; ``reference`` is the original it must agree with."""

    strategy: str  # pack_opt strategy; none = the original Hyperband
    optimizer_impl: str = "fused"  # torch.optim kernels, packed and unpacked alike
    mix: bool = False  # --mix-activations
    batch_mode: str = "pad"
    concurrent: bool = False  # --concurrent-brackets
    workers: int = 1  # --workers: processes with one torch thread each
    backward: str = "direct"  # --backward of ragged fused groups
    gate: bool = False  # time each kind of pack against its trials alone first (not in the paper)

    @property
    def reference(self) -> str:
        return "original" if self.optimizer_impl == "fused" else "original-for-loop"


VARIANTS = {
    "original": Variant("none"),
    "original-for-loop": Variant("none", "for-loop"),
    "batch-size": Variant("batch-size"),
    "random": Variant("random"),
    "knn": Variant("knn"),
    "knn+mix": Variant("knn", mix=True),
    "knn-ragged": Variant("knn", batch_mode="ragged"),
    "knn-concurrent": Variant("knn", concurrent=True),
    "knn-ragged-concurrent": Variant("knn", batch_mode="ragged", concurrent=True),
    "knn-ragged-concurrent+mix": Variant("knn", mix=True, batch_mode="ragged", concurrent=True),
    "knn-ragged-concurrent-autograd": Variant(
        "knn", batch_mode="ragged", concurrent=True, backward="autograd"
    ),
    "knn-ragged-concurrent-for-loop": Variant(
        "knn", "for-loop", batch_mode="ragged", concurrent=True
    ),
    # two worker processes, one torch thread each (the original: two trials at a time)
    "original-2w": Variant("none", workers=2),
    "original-for-loop-2w": Variant("none", "for-loop", workers=2),
    "knn-ragged-concurrent-2w": Variant("knn", batch_mode="ragged", concurrent=True, workers=2),
    "knn-ragged-concurrent+mix-2w": Variant(
        "knn", mix=True, batch_mode="ragged", concurrent=True, workers=2
    ),
    # brackets one after another: a model-based sampler (the Optuna driver's TPE) learns
    # from each bracket before the next is asked (concurrent brackets are all asked at once)
    "knn-ragged+mix-2w": Variant("knn", mix=True, batch_mode="ragged", workers=2),
    "knn-ragged-concurrent-for-loop-2w": Variant(
        "knn", "for-loop", batch_mode="ragged", concurrent=True, workers=2
    ),
    "knn-ragged-concurrent+mix-autograd-2w": Variant(
        "knn", mix=True, batch_mode="ragged", concurrent=True, workers=2, backward="autograd"
    ),
}
DEFAULT_VARIANTS = ",".join(VARIANTS)
# each packed variant with the pack gate (rightsize.packing.probe), which the paper has not
VARIANTS.update(
    {f"{n}+gate": replace(v, gate=True) for n, v in VARIANTS.items() if v.strategy != "none"}
)


def tune_settings(variant: Variant, args) -> TuneSettings:
    """The search of ``variant`` with the options of :func:`search_arguments` (tune_peers.py too)."""
    return TuneSettings(
        workload=args.workload, dataset=args.dataset, max_resource=args.max_resource, eta=args.eta,
        seed=args.seed, steps_per_unit=args.steps_per_unit,
        memory_limit_bytes=parse_memory(args.memory_limit, "--memory-limit"),
        packopt=PackOptSettings(variant.strategy, args.threshold),
        probe=ProbeSettings(enabled=variant.gate),
        unpacked_engine=f"torch-{variant.optimizer_impl}",
        pack=PackSettings(
            batch_mode=variant.batch_mode, mix_activations=variant.mix,
            optimizer_impl=variant.optimizer_impl, backward=variant.backward,
        ),
        concurrent_brackets=variant.concurrent, workers=variant.workers,
        worker_allocator=args.allocator,
    )  # fmt: skip


def run_variant(name: str, threads: int, args, registry: WorkloadRegistry, space) -> dict:
    variant = VARIANTS[name]
    settings = tune_settings(variant, args)
    torch.set_num_threads(threads)
    search = prepare_search(settings, space, registry)
    cpu_start = _cpu_s()
    report = search_report(search, run_search(search))
    # CPU seconds of this process and its (joined) workers: with one thread, closer
    # than wall time to the work done on a busy machine; with two OpenMP threads
    # they spin at barriers and inflate it
    report["cpu_s"] = _cpu_s() - cpu_start
    report["threads"], report["cores"] = threads, threads * variant.workers
    return report


def _cpu_s() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def summarize(reports: dict[tuple[str, int], list[dict]]) -> dict:
    """Medians per (variant, threads), speedups at the same thread count and best against best."""
    rows = {}
    for (name, threads), runs in reports.items():
        reference = reports.get((VARIANTS[name].reference, threads))
        first = runs[0]
        rows[f"{name}@{threads}t"] = {
            "variant": name, "threads": threads, "workers": VARIANTS[name].workers,
            "cores": threads * VARIANTS[name].workers, "reference": VARIANTS[name].reference,
            "wall_s": statistics.median(r["wall_s"] for r in runs),
            "walls_s": [r["wall_s"] for r in runs],
            "cpu_s": statistics.median(r["cpu_s"] for r in runs),
            "cpus_s": [r["cpu_s"] for r in runs],
            "best": first["best"],
            "same_best_as_reference": reference is not None
            and all(_best(r) == _best(reference[0]) for r in runs),
            "same_losses_as_reference": reference is not None
            and all(_losses(r) == _losses(reference[0]) for r in runs),
            "same_best_as_original": all(_best(r) == _best(_any(reports, "original")) for r in runs),
            "packs_per_rung": [len(r["packs"]) for r in first["rungs"]],
            "largest_pack_per_rung": [max(len(p) for p in r["packs"]) for r in first["rungs"]],
            "switch_s": sum(r["switch_s"] for r in first["rungs"]),
            "pack_gate": _gate_summary(first.get("pack_gate")),
        }  # fmt: skip
    for row in rows.values():
        # the reference (one trial at a time) using as many cores, as OpenMP threads
        same = rows.get(f"{row['reference']}@{row['cores']}t")
        if same:
            row["speedup_vs_reference_same_cores"] = same["wall_s"] / row["wall_s"]
            row["cpu_speedup_vs_reference_same_cores"] = same["cpu_s"] / row["cpu_s"]
        best_reference = _best_row(rows, row["reference"])
        if best_reference:
            row["speedup_vs_best_reference"] = best_reference["wall_s"] / row["wall_s"]
    return rows


def _gate_summary(gate: dict | None) -> dict | None:
    if gate is None:
        return None
    probes = gate["probes"]
    return {
        "seconds": gate["seconds"], "kinds_timed": len(probes),
        "kept": sum(p["packed"] for p in probes),
        "gains": [round(p["gain"], 3) for p in probes],
    }  # fmt: skip


def headline(rows: dict) -> dict:
    """Per reference: its fastest run against the fastest packed variant that agrees with it.

    ``<reference>`` is the paper's original, one trial at a time on the device
    (at its best thread count); ``<reference> or 2 workers`` also lets the
    original train two trials at a time, one per core — a stronger baseline
    than the paper's.
    """
    out = {}
    for reference in ("original", "original-for-loop"):
        agreeing = [
            r for r in rows.values()
            if r["reference"] == reference and not r["variant"].startswith(reference)
            and r["same_best_as_reference"] and r["same_losses_as_reference"]
        ]  # fmt: skip
        for label, names in (
            (reference, (reference,)),
            (f"{reference} or 2 workers", (reference, f"{reference}-2w")),
        ):
            bases = [r for r in rows.values() if r["variant"] in names]
            if bases and agreeing:
                base, best = min(bases, key=_wall), min(agreeing, key=_wall)
                out[label] = {
                    "reference": _key(base), "reference_wall_s": base["wall_s"],
                    "packed": _key(best), "packed_wall_s": best["wall_s"],
                    "speedup": base["wall_s"] / best["wall_s"],
                }  # fmt: skip
    return out


def _wall(row: dict) -> float:
    return row["wall_s"]


def _key(row: dict) -> str:
    return f"{row['variant']}@{row['threads']}t"


def _best_row(rows: dict, variant: str) -> dict | None:
    candidates = [r for r in rows.values() if r["variant"] == variant]
    return min(candidates, key=lambda r: r["wall_s"]) if candidates else None


def _any(reports: dict, name: str) -> dict:
    return next(runs[0] for (n, _), runs in reports.items() if n == name)


def _best(report: dict) -> tuple:
    return report["best"]["trial_id"], report["best"]["config"]


def _losses(report: dict) -> list[dict]:
    return [r["losses"] for r in report["rungs"]]


def search_arguments(parser: argparse.ArgumentParser) -> None:
    """The search's own options (what :func:`run_variant` reads), shared with packing_ceiling."""
    parser.add_argument("--workload", default="mlp3")
    parser.add_argument("--dataset", default="digits")
    parser.add_argument("--space", default=str(ROOT / "examples" / "spaces" / "table3.yaml"))
    parser.add_argument("--max-resource", type=float, default=81)
    parser.add_argument("--eta", type=float, default=3)
    parser.add_argument("--steps-per-unit", type=int, default=10)
    parser.add_argument("--memory-limit", default="40Mi", help="pack memory limit (default 40Mi)")
    parser.add_argument("--threshold", type=float, default=float("inf"), help="knn threshold")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--allocator", choices=("retain", "default"), default="retain")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    search_arguments(parser)
    parser.add_argument(
        "--repeats", type=int, default=3, help="runs of each variant (medians kept)"
    )
    parser.add_argument("--variants", default=DEFAULT_VARIANTS)
    parser.add_argument(
        "--threads", default="1,2", help="torch thread counts, each variant at each (default 1,2)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="R=9, 2 steps per unit, 1 run: check it runs"
    )
    parser.add_argument("--out", default="benchmarks/results/packing_hyperband_mlp3.json")
    args = parser.parse_args(argv)
    if args.quick:
        args.max_resource, args.steps_per_unit, args.repeats = 9, 2, 1
    thread_counts = [int(t) for t in args.threads.split(",")]
    process = setup_process(thread_counts[0], args.allocator)
    registry = WorkloadRegistry()
    space = load_space(args.space, model_option_names(registry, args.workload))
    names = args.variants.split(",")
    unknown = [n for n in names if n not in VARIANTS]
    if unknown or "original" not in names:
        parser.error(f"--variants: unknown {unknown}; must include original; have {list(VARIANTS)}")
    # a variant with worker processes runs them at one thread each: only at --threads 1
    runs = [
        (name, threads)
        for name in names
        for threads in thread_counts
        if VARIANTS[name].workers == 1 or threads == 1
    ]
    reports: dict[tuple[str, int], list[dict]] = {run: [] for run in runs}
    for repeat, order in shuffled_rounds(runs, args.repeats, args.seed):
        for name, threads in order:
            report = run_variant(name, threads, args, registry, space)
            reports[(name, threads)].append(report)
            best = report["best"]
            print(
                f"run {repeat + 1}/{args.repeats} {name:32s} {threads}t {report['wall_s']:7.1f}s "
                f"(cpu {report['cpu_s']:7.1f}s)  best {best['trial_id']} "
                f"loss {best['val_loss']:.5f} {best['config']}",
                file=sys.stderr,
                flush=True,
            )
    rows = summarize(reports)
    for key, row in sorted(rows.items(), key=lambda item: (item[1]["threads"], item[0])):
        print(
            f"{key:36s} median {row['wall_s']:7.1f}s  "
            f"vs {row['reference']} same cores "
            f"{row.get('speedup_vs_reference_same_cores', float('nan')):.2f}x, vs its best "
            f"{row.get('speedup_vs_best_reference', float('nan')):.2f}x  cpu {row['cpu_s']:7.1f}s  "
            f"same best/losses: {row['same_best_as_reference']}/{row['same_losses_as_reference']}",
            file=sys.stderr,
        )
    top = headline(rows)
    for reference, item in top.items():
        print(
            f"headline vs {reference}: {item['reference']} {item['reference_wall_s']:.1f}s / "
            f"{item['packed']} {item['packed_wall_s']:.1f}s = {item['speedup']:.2f}x",
            file=sys.stderr,
        )
    body = {
        "process": process,
        "load": load_note(),
        "settings": {k: v for k, v in vars(args).items() if k not in ("out",)},
        "space_size": space.size,
        "variants": rows,
        "headline": top,
        "reports": {f"{n}@{t}t": runs[0] for (n, t), runs in reports.items()},
    }
    write_report(args.out, "packing_hyperband", argv, body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
