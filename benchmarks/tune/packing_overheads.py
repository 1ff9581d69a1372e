"""What a packed search spends outside training steps: moving checkpoints, measuring memory.

1. **Checkpoint codec** — a group of MLP-3 trials' checkpoints (weights, Adam's
   moments and step, the random-number state), as a worker pool sends them
   through a pipe: ``torch.save``/``torch.load`` (the codec before) against
   ``pool.dumps``/``pool.loads`` (each tensor's raw buffer in a pickle),
   interleaved, per group.
2. **Footprint measurement** — ``packing.memory.measure_footprint`` of one MLP-3
   architecture as ``rightsize tune`` runs it before the search, with and
   without ``profiling.memory.frozen_heap`` (one garbage collection for all of
   its measurements instead of one each), interleaved.

Usage:
    python benchmarks/tune/packing_overheads.py --out benchmarks/results/packing_overheads.json
"""

from __future__ import annotations

import argparse
import io
import sys
from contextlib import nullcontext
from pathlib import Path
from unittest import mock

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.lib.timing import interleaved_medians
from benchmarks.tune.packing_common import (
    setup_process,
    trial_set,
    workload_setup,
    write_report,
)
from rightsize.packing import memory
from rightsize.packing.alone import train_alone
from rightsize.packing.pool import dumps, loads
from rightsize.packing.trial import TrialState


def checkpoints(architectures, stream, trials: int) -> list[TrialState]:
    """``trials`` MLP-3 checkpoints after two steps of Adam (moments and step exist)."""
    specs = trial_set(trials, "diff", "same")
    return [train_alone(TrialState(s), architectures, stream, 2).state for s in specs]


def torch_dumps(value) -> bytes:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def torch_loads(data: bytes):
    return torch.load(io.BytesIO(data), weights_only=False)


def codec_times(states: list[TrialState], rounds: int) -> dict:
    as_torch, as_pickle = torch_dumps(states), dumps(states)
    timed = interleaved_medians(
        {
            "torch_save": lambda: torch_dumps(states),
            "torch_load": lambda: torch_loads(as_torch),
            "pool_dumps": lambda: dumps(states),
            "pool_loads": lambda: loads(as_pickle),
        },
        rounds,
    )
    medians = {name: result["median_s"] for name, result in timed.items()}
    return {
        "trials": len(states),
        "bytes": {"torch_save": len(as_torch), "pool_dumps": len(as_pickle)},
        "median_s": medians,
        "write_speedup": medians["torch_save"] / medians["pool_dumps"],
        "read_speedup": medians["torch_load"] / medians["pool_loads"],
    }


def footprint_times(architectures, rounds: int) -> dict:
    workload = architectures.workload((("activation", "tanh"),))

    def measure(frozen: bool) -> None:
        heap = memory.frozen_heap if frozen else nullcontext
        with mock.patch.object(memory, "frozen_heap", heap):
            memory.measure_footprint(workload)

    timed = interleaved_medians(
        {"frozen_heap": lambda: measure(True), "collect_each": lambda: measure(False)},
        rounds,
        warmup=1,
    )
    medians = {name: result["median_s"] for name, result in timed.items()}
    return {"median_s": medians, "speedup": medians["collect_each"] / medians["frozen_heap"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=7, help="checkpoints per group (default 7)")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--out", default="benchmarks/results/packing_overheads.json")
    args = parser.parse_args(argv)
    process = setup_process(1, "retain")
    architectures, stream = workload_setup("mlp3", "digits", {})
    states = checkpoints(architectures, stream, args.trials)
    codec = codec_times(states, args.rounds)
    footprint = footprint_times(architectures, max(3, args.rounds // 3))
    print(
        f"checkpoints of {args.trials} trials ({codec['bytes']['pool_dumps'] / 1e6:.1f} MB): "
        f"write {codec['median_s']['torch_save'] * 1e3:.1f} -> "
        f"{codec['median_s']['pool_dumps'] * 1e3:.1f} ms, read "
        f"{codec['median_s']['torch_load'] * 1e3:.1f} -> "
        f"{codec['median_s']['pool_loads'] * 1e3:.1f} ms; footprint "
        f"{footprint['median_s']['collect_each']:.3f} -> {footprint['median_s']['frozen_heap']:.3f} s"
    )
    write_report(
        args.out, "packing_overheads", argv,
        {"process": process, "checkpoint_codec": codec, "footprint": footprint},
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
