"""The ceiling of Packed Hyperband on this CPU: how fast could the search be if only its steps took time?

The end-to-end benchmark (``packing_hyperband.py``) measures how much faster the
packed search is than the original. This measures how much faster it *could*
be with the packed training step it has. Interleaved over ``--repeats``
rounds it runs:

- ``original`` at 2 threads: the original Hyperband (one trial at a time,
  ``torch.optim(fused=True)``), the headline's reference at its best thread count;
- the headline's packed search (``--variant``, default
  ``knn-ragged-concurrent+mix``: kNN packs, ragged batches, brackets side by
  side, mixed activations fused, the direct step) in one process at one
  thread, timing every pack's training step: forward and backward, and the
  vectorized optimizer update apart.

A search on ``W`` cores can be no faster than its steps' seconds over ``W``,
whatever else it does: that bound assumes perfect scaling and nothing outside
the steps (no evaluation, checkpoints, pack building or waiting at phase
barriers). So ``original_s / (step_s / W)`` is the largest speedup the packed
step allows, and ``step_s / trial_steps`` is what one trial-step costs in it.
The instrumentation only reads a clock around two calls. Each round records
both searches' best configurations but does not require them to agree: two
threads sum a product's terms in another order than one, and on some CPUs
(AMD EPYC here) that alone changes which trial Hyperband promotes.
``packing_hyperband.py`` checks packed against original at the same threads.

Usage:
    python benchmarks/tune/packing_ceiling.py --out benchmarks/results/packing_ceiling.json
    python benchmarks/tune/packing_ceiling.py --quick      # a smoke run, numbers meaningless
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.tune.packing_common import setup_process, write_report
from benchmarks.tune.packing_hyperband import VARIANTS, run_variant, search_arguments
from rightsize.packing.optimizers import VectorOptimizer
from rightsize.packing.pack import Pack
from rightsize.packing.runner import model_option_names
from rightsize.packing.space import load_space
from rightsize.workloads.registry import WorkloadRegistry

REFERENCE = ("original", 2)  # the headline's reference: one trial at a time, its best threads
CORES = 2  # this machine's, and the two workers of the headline's packed run


@contextmanager
def step_clock() -> Iterator[dict[str, float]]:
    """Seconds in ``Pack.train_step`` and, within it, in the optimizer update, while open."""
    spent = {"step_s": 0.0, "steps": 0, "optimizer_step_s": 0.0, "optimizer_steps": 0}
    train_step, optimizer_step = Pack.train_step, VectorOptimizer.step

    def timed(method, name: str):
        def call(self, *args, **kwargs):
            start = time.perf_counter()
            try:
                return method(self, *args, **kwargs)
            finally:
                spent[f"{name}_s"] += time.perf_counter() - start
                spent[f"{name}s"] += 1

        return call

    Pack.train_step = timed(train_step, "step")
    VectorOptimizer.step = timed(optimizer_step, "optimizer_step")
    try:
        yield spent
    finally:
        Pack.train_step, VectorOptimizer.step = train_step, optimizer_step


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    search_arguments(parser)
    parser.add_argument("--variant", default="knn-ragged-concurrent+mix")
    parser.add_argument("--repeats", type=int, default=3, help="rounds (medians kept)")
    parser.add_argument("--quick", action="store_true", help="R=9, 2 steps per unit, 1 round")
    parser.add_argument("--out", default="benchmarks/results/packing_ceiling.json")
    args = parser.parse_args(argv)
    if args.variant not in VARIANTS or VARIANTS[args.variant].workers != 1:
        parser.error(f"--variant: a one-process variant of {list(VARIANTS)}")
    if args.quick:
        args.max_resource, args.steps_per_unit, args.repeats = 9, 2, 1
    process = setup_process(1, args.allocator)
    registry = WorkloadRegistry()
    space = load_space(args.space, model_option_names(registry, args.workload))
    rounds = []
    for repeat in range(args.repeats):
        # alternate which runs first, so warm-up and drift land on both alike
        for which in ("original", "packed") if repeat % 2 == 0 else ("packed", "original"):
            if which == "original":
                original = run_variant(REFERENCE[0], REFERENCE[1], args, registry, space)
                continue
            with step_clock() as spent:
                packed = run_variant(args.variant, 1, args, registry, space)
        trial_steps = packed["trial_steps"]
        row = {
            "original_s": original["wall_s"],
            "packed_s": packed["wall_s"],
            **spent,
            "trial_steps": trial_steps,
            "step_share_of_packed": spent["step_s"] / packed["wall_s"],
            "ms_per_trial_step": 1e3 * spent["step_s"] / trial_steps,
            "optimizer_ms_per_trial_step": 1e3 * spent["optimizer_step_s"] / trial_steps,
            "ceiling_speedup": original["wall_s"] / (spent["step_s"] / CORES),
            "best": {"original": original["best"], "packed": packed["best"]},
        }
        rounds.append(row)
        print(
            f"round {repeat + 1}/{args.repeats}: original@2t {row['original_s']:.2f}s, "
            f"{args.variant}@1t {row['packed_s']:.2f}s of which steps {row['step_s']:.2f}s "
            f"({row['step_share_of_packed']:.0%}; {row['ms_per_trial_step']:.3f} ms per "
            f"trial-step, optimizer {row['optimizer_ms_per_trial_step']:.3f}); ceiling on "
            f"{CORES} cores {row['ceiling_speedup']:.2f}x",
            file=sys.stderr,
            flush=True,
        )
    medians = {key: statistics.median(r[key] for r in rounds) for key in rounds[0] if key != "best"}
    print(
        f"medians: original {medians['original_s']:.2f}s, steps {medians['step_s']:.2f}s "
        f"({medians['ms_per_trial_step']:.3f} ms per trial-step), ceiling "
        f"{medians['ceiling_speedup']:.2f}x",
        file=sys.stderr,
    )
    body = {
        "process": process,
        "variant": args.variant,
        "reference": f"{REFERENCE[0]}@{REFERENCE[1]}t",
        "cores": CORES,
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "rounds": rounds,
        "medians": medians,
    }
    write_report(args.out, "packing_ceiling", argv, body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
