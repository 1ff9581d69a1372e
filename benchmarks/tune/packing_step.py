"""Per-step improvement of packing (packing paper §4.2 eq. 1-3), memory peak (§4.5), switching (§4.6).

For MLP-3 and the small CNN, n = 2, 4, 8 trials are trained one step at a time
four ways, interleaved round by round on the same machine:

- ``seq`` — each trial alone with plain PyTorch (its own ``nn.Module``, its own
  ``torch.optim`` optimizer in its default implementation, its own batch
  gathered from the dataset), one after another: T_s(Seq) of eq. 1;
- ``seq_fused`` — the same with ``torch.optim(fused=True)`` (the update kernels a
  pack uses), to separate what packing gains from what the fused update gains;
- ``pack`` — all n in one pack (``rightsize.packing.pack``): T_s(Pack) of eq. 2;
- ``pack_ragged`` — the same with ``--batch-mode ragged`` (no padded rows; beyond the
  paper), its MLP groups on the direct step (``--backward direct``, the default).

IMPV = (T_s(Seq) - T_s(Pack)) / T_s(Seq) (eq. 3), per scenario: same or
different batch sizes (45, or spread over Table 3's 20..70), same or different
optimizers (Adam, or SGD/Momentum/Adam/Adagrad in turn), and different
activations (different architectures: the general path for each).

Memory: the measured peak of one pack step (resident-set high-water mark, as
``rightsize profile`` measures) against the estimate pack_opt plans with.
Switching (Table 2): n = 4 trials with different batch sizes each train one
epoch; alone one after another (Seq), and packed, where the trial that
finishes first is checkpointed and the rest repacked (§3.1.2); the switching
overhead is the time spent in those repacks.

Usage:
    python benchmarks/tune/packing_step.py --out benchmarks/results/packing_step.json
    python benchmarks/tune/packing_step.py --quick          # a smoke run, numbers meaningless
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.lib.timing import interleaved_medians
from benchmarks.tune.packing_common import (
    setup_process,
    trial_set,
    workload_setup,
    write_report,
)
from rightsize.packing.alone import train_alone
from rightsize.packing.memory import PackMemory, measure_footprint
from rightsize.packing.optimizers import torch_optimizer
from rightsize.packing.pack import PackSettings, load, pack, train
from rightsize.packing.trial import TrialState
from rightsize.profiling.memory import CpuPeakMeter, tensor_bytes

MODELS = {
    "mlp3": ("mlp3", "digits", {}),
    "small-cnn": ("small-cnn", "synthetic-cifar", {}),
    "small-cnn-digits": ("small-cnn", "digits", {}),
}
SCENARIOS = [  # (batches, optimizers, activations)
    ("same", "same", "same"),
    ("different", "same", "same"),
    ("same", "different", "same"),
    ("different", "different", "same"),
    ("same", "same", "different"),
]


class Alone:
    """n trials trained one after another with plain PyTorch, one step each per call."""

    def __init__(self, specs, architectures, stream, fused: bool) -> None:
        self.items = []
        for spec in specs:
            workload = architectures.workload(spec.model_options)
            model = workload.make_model(spec.seed)
            optimizer = torch_optimizer(spec.optimizer, model.parameters(), fused=fused or None)
            self.items.append((spec, workload, model, optimizer))
        self.stream, self.step = stream, 0

    def __call__(self) -> None:
        for spec, workload, model, optimizer in self.items:
            optimizer.zero_grad(set_to_none=True)
            workload.loss(model, self.stream.batch(self.step, spec.batch_size)).backward()
            optimizer.step()
        self.step += 1


def packed(specs, architectures, stream, settings: PackSettings | None = None):
    loaded = [load(TrialState(s), architectures, "cpu") for s in specs]
    return pack(loaded, stream, settings or PackSettings())


def step_case(specs, architectures, stream, rounds: int, inner: int) -> dict:
    p = packed(specs, architectures, stream)
    ragged = packed(specs, architectures, stream, PackSettings(batch_mode="ragged"))
    variants = {
        "seq": Alone(specs, architectures, stream, fused=False),
        "seq_fused": Alone(specs, architectures, stream, fused=True),
        "pack": p.train_step,
        "pack_ragged": ragged.train_step,
    }
    timed = interleaved_medians(variants, rounds, inner)
    seq, fused, packed_s = (timed[k]["median_s"] for k in ("seq", "seq_fused", "pack"))
    ragged_s = timed["pack_ragged"]["median_s"]
    return {
        "pack_ragged_s": ragged_s,
        "impv_ragged": (seq - ragged_s) / seq,
        "impv_ragged_vs_fused": (fused - ragged_s) / fused,
        "memory_ragged": memory_case(ragged, specs, architectures, pad=False),
        "trials": [_describe(s) for s in specs],
        "groups": p.fused_sizes,
        "seq_s": seq,
        "seq_fused_s": fused,
        "pack_s": packed_s,
        "impv": (seq - packed_s) / seq,
        "impv_vs_fused": (fused - packed_s) / fused,
        "speedup": seq / packed_s,
        "speedup_vs_fused": fused / packed_s,
        "runs": {k: v["runs_s"] for k, v in timed.items()},
        "memory": memory_case(p, specs, architectures, pad=True),
    }


def memory_case(p, specs, architectures, pad: bool) -> dict:
    """Measured peak of one pack step, pack_opt's estimate, and what admission charges."""
    tensors = []
    for group in p.groups:
        tensors += [t for params in group.params() for t in params]
        tensors += [
            v for trial in group.trials for s in trial.optimizer_state.values() for v in s.values()
        ]
    meter = CpuPeakMeter()
    peak = max(meter.measure(p.train_step, tensor_bytes(tensors)) for _ in range(3))
    cache = {}

    def footprint(options):
        if options not in cache:
            cache[options] = measure_footprint(architectures.workload(options))
        return cache[options]

    memory = PackMemory(footprint, capacity_bytes=0, pad=pad)
    return {
        "measured_peak_bytes": peak,
        "estimated_bytes": memory.pack_bytes(specs),
        "admitted_bytes": memory.needed_bytes(specs),  # the estimate times the headroom
        "headroom": memory.headroom,
    }


def switching_case(architectures, stream, n: int, epoch_samples: int) -> dict:
    """Table 2: one epoch per trial, alone in sequence vs packed with repacking."""
    specs = trial_set(n, "different", "different")
    targets = {s.trial_id: math.ceil(epoch_samples / s.batch_size) for s in specs}
    started = time.perf_counter()
    single = []
    for spec in specs:
        t0 = time.perf_counter()
        train_alone(
            TrialState(spec), architectures, stream, targets[spec.trial_id], fused_optimizer=True
        )
        single.append(time.perf_counter() - t0)
    seq = time.perf_counter() - started
    started = time.perf_counter()
    p = packed(specs, architectures, stream)
    train(p, targets)
    pack_s = time.perf_counter() - started
    switches = [s for s in p.switches if s.remaining]
    return {
        "trials": [_describe(s) for s in specs],
        "epoch_steps": targets,
        "seq_s": seq,
        "single_s": single,
        "pack_s": pack_s,
        "switch_overhead_s": sum(s.seconds for s in switches),
        "switches": [
            {"left": list(s.trial_ids), "seconds": s.seconds, "remaining": s.remaining}
            for s in switches
        ],
    }


def _describe(spec) -> dict:
    return {
        "batch_size": spec.batch_size,
        "optimizer": spec.optimizer.kind,
        "activation": dict(spec.model_options).get("activation"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--models", default="mlp3,small-cnn", help="comma-separated: " + ", ".join(MODELS)
    )
    parser.add_argument("--counts", default="2,4,8", help="trials per pack (comma-separated)")
    parser.add_argument(
        "--rounds", type=int, default=15, help="interleaved timing rounds (medians kept)"
    )
    parser.add_argument("--inner", type=int, default=3, help="steps per timing")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads (default 1: see docs/profiling.md)"
    )
    parser.add_argument("--allocator", choices=("retain", "default"), default="retain")
    parser.add_argument(
        "--epoch-samples",
        type=int,
        default=1438,
        help="samples in the switching test's epoch (default: digits' training set)",
    )
    parser.add_argument("--quick", action="store_true", help="n=2, 2 rounds: check the script runs")
    parser.add_argument("--out", default="benchmarks/results/packing_step.json")
    args = parser.parse_args(argv)
    process = setup_process(args.threads, args.allocator)
    counts = [2] if args.quick else [int(c) for c in args.counts.split(",")]
    rounds, inner = (2, 1) if args.quick else (args.rounds, args.inner)
    results = []
    for name in args.models.split(","):
        workload, dataset, options = MODELS[name]
        architectures, stream = workload_setup(workload, dataset, options)
        for batches, optimizers, activations in SCENARIOS:
            for n in counts:
                specs = trial_set(n, batches, optimizers, activations)
                case = step_case(specs, architectures, stream, rounds, inner)
                case.update(
                    model=name, n=n, batches=batches, optimizers=optimizers, activations=activations
                )
                results.append(case)
                print(
                    f"{name:16s} n={n} batch={batches:9s} opt={optimizers:9s} act={activations:9s} "
                    f"seq {case['seq_s'] * 1e3:7.2f}ms  seq(fused) {case['seq_fused_s'] * 1e3:7.2f}ms  "
                    f"pack {case['pack_s'] * 1e3:7.2f}ms  IMPV {case['impv']:+.2f} "
                    f"(vs fused {case['impv_vs_fused']:+.2f})  ragged "
                    f"{case['pack_ragged_s'] * 1e3:7.2f}ms  IMPV {case['impv_ragged']:+.2f} "
                    f"(vs fused {case['impv_ragged_vs_fused']:+.2f})",
                    file=sys.stderr,
                    flush=True,
                )
    epoch = 200 if args.quick else args.epoch_samples
    switching = []
    for name in args.models.split(","):
        workload, dataset, options = MODELS[name]
        architectures, stream = workload_setup(workload, dataset, options)
        case = switching_case(architectures, stream, 4, epoch)
        case["model"] = name
        switching.append(case)
        print(
            f"{name:16s} one epoch x 4 trials: seq {case['seq_s']:.2f}s  pack {case['pack_s']:.2f}s  "
            f"switch overhead {case['switch_overhead_s'] * 1e3:.1f}ms in {len(case['switches'])} switches",
            file=sys.stderr,
        )
    summary = {
        "median_impv": statistics.median(r["impv"] for r in results),
        "median_impv_vs_fused": statistics.median(r["impv_vs_fused"] for r in results),
        "median_impv_ragged": statistics.median(r["impv_ragged"] for r in results),
        "median_impv_ragged_vs_fused": statistics.median(
            r["impv_ragged_vs_fused"] for r in results
        ),
        "largest_peak_over_admitted": max(
            r[key]["measured_peak_bytes"] / r[key]["admitted_bytes"]
            for r in results
            for key in ("memory", "memory_ragged")
        ),
    }
    write_report(
        args.out, "packing_step", argv,
        {"process": process, "rounds": rounds, "inner": inner, "steps": results, "switching": switching, "summary": summary},
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
