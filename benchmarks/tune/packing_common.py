"""Helpers shared by the packing benchmarks: the process set-up, trial sets, JSON output.

Not a benchmark itself. Timing (``benchmarks/lib/timing.py``) follows the rest of
``benchmarks/``: every variant is timed once per round, in a shuffled order, and medians
over rounds are kept, so drift on a shared machine lands on all variants alike; ratios
are taken between medians measured in the same run.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.lib import envelope
from rightsize.packing.allocator import retain_freed_memory
from rightsize.packing.data import DataStream
from rightsize.packing.optimizers import OPTIMIZER_KINDS, OptimizerSpec
from rightsize.packing.trial import Architectures, TrialSpec
from rightsize.workloads.registry import WorkloadRegistry

#: Learning rate of every benchmark trial (any value in the paper's range would do).
BENCH_LR = 1e-3
#: The paper's Table 3 batch sizes: "different batch sizes" spread over them.
BATCH_SIZES = tuple(range(20, 71, 5))
SAME_BATCH = 45  # the middle of Table 3's range


def setup_process(threads: int, allocator: str) -> dict:
    """Threads and allocator for every variant alike; returns them for the JSON."""
    torch.set_num_threads(threads)
    retained = retain_freed_memory() if allocator == "retain" else False
    return {"threads": threads, "allocator": allocator, "allocator_applied": retained}


def workload_setup(workload: str, dataset: str, options: dict, seed: int = 0):
    """Architectures for ``workload`` and a stream as wide as Table 3's largest batch."""
    registry = WorkloadRegistry()
    architectures = Architectures(
        lambda extra: registry.get(workload, dataset, {**options, **extra})
    )
    stream = DataStream(architectures.workload(()).dataset, max(BATCH_SIZES), seed)
    return architectures, stream


def trial_set(n: int, batches: str, optimizers: str, activations: str = "same") -> list[TrialSpec]:
    """n trials: same or spread batch sizes, one or all four optimizers, one or varied activations."""
    specs = []
    for i in range(n):
        batch = SAME_BATCH if batches == "same" else _spread(BATCH_SIZES, n)[i]
        kind = "adam" if optimizers == "same" else OPTIMIZER_KINDS[i % len(OPTIMIZER_KINDS)]
        activation = (
            "relu" if activations == "same" else ("relu", "tanh", "sigmoid", "leaky_relu")[i % 4]
        )
        options = (("activation", activation),)
        specs.append(TrialSpec(f"t{i}", batch, OptimizerSpec(kind, BENCH_LR), options, seed=i))
    return specs


def _spread(values: tuple[int, ...], n: int) -> list[int]:
    """n values evenly spread over ``values`` (both ends included when n > 1)."""
    if n == 1:
        return [values[len(values) // 2]]
    return [values[round(i * (len(values) - 1) / (n - 1))] for i in range(n)]


def write_report(path: str, name: str, argv: list[str] | None, body: dict) -> None:
    """Write the benchmark's JSON in the envelope (``argv``: ``main``'s own arguments)."""
    report = {"benchmark": name, "simulated": False, **body}
    print(f"wrote {envelope.write_report(path, report, indent=1, args=argv)}", file=sys.stderr)
