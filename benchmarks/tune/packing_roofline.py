"""The limit: achieved FLOP/s of packed MLP-3 training against this CPU's matmul FLOP/s.

On a CPU a pack cannot make a trial's arithmetic smaller: packing removes
per-trial overheads (dispatch, small kernels, the optimizer's passes, data
gathering) until the step is as fast as its matrix products allow. This
measures how close it gets:

1. matmul FLOP/s of this CPU: a large square product (the attainable peak) and
   the products an MLP-3 step on digits runs at batch 45;
2. training FLOPs of one MLP-3 step (forward + backward, counted by
   ``torch.utils.flop_counter``), and the achieved FLOP/s of packs of
   n = 1 .. 32 identical-shape trials (Adam, batch 45; padded layout, ragged with
   the direct step, ragged through autograd) and of plain PyTorch alone
   (default and fused ``torch.optim``);
3. the floor of one trial-step: its matrix products alone (forward and
   backward, at the exact shapes, no autograd) plus one fused Adam update of
   its parameters. No packing can beat it on this CPU, so ``alone / floor`` is
   the largest speedup packing can give at this thread count.

Usage:
    python benchmarks/tune/packing_roofline.py --out benchmarks/results/packing_roofline.json
    python benchmarks/tune/packing_roofline.py --quick
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.lib.timing import interleaved_medians
from benchmarks.tune.packing_common import (
    SAME_BATCH,
    setup_process,
    trial_set,
    workload_setup,
    write_report,
)
from benchmarks.tune.packing_step import Alone, packed
from rightsize.packing.optimizers import OptimizerSpec, new_state, torch_optimizer
from rightsize.packing.pack import PackSettings


def matmul_flops_per_s(shapes, rounds: int) -> list[dict]:
    """Median FLOP/s of ``a @ b`` for each ``(m, k, n)``."""
    cases = {}
    for m, k, n in shapes:
        a, b = torch.randn(m, k), torch.randn(k, n)
        repeat = max(1, int(2e8 // (2 * m * k * n)))  # ~0.2 GFLOP per timing

        def product(a=a, b=b, repeat=repeat):
            for _ in range(repeat):
                torch.mm(a, b)

        cases[(m, k, n, repeat)] = product
    timed = interleaved_medians({str(key): fn for key, fn in cases.items()}, rounds)
    rows = []
    for m, k, n, repeat in cases:
        seconds = timed[str((m, k, n, repeat))]["median_s"] / repeat
        rows.append(
            {"m": m, "k": k, "n": n, "seconds": seconds, "flops_per_s": 2 * m * k * n / seconds}
        )
    return rows


def training_flops(architectures, stream) -> float:
    """FLOPs of one MLP-3 training step (forward and backward) at batch 45."""
    workload = architectures.workload((("activation", "relu"),))
    model = workload.make_model(0)
    with FlopCounterMode(display=False) as counter:
        workload.loss(model, stream.batch(0, SAME_BATCH)).backward()
    return float(counter.get_total_flops())


def floor_seconds(architectures, batch: int, rounds: int) -> dict:
    """Seconds of one trial-step's products alone, and of its fused Adam update."""
    model = architectures.workload((("activation", "relu"),)).make_model(0)
    layers = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    weights = [(m.weight.detach(), m.bias.detach()) for m in layers]
    x = torch.randn(batch, layers[0].in_features)

    def products() -> None:
        inputs = [x]
        for w, b in weights:
            inputs.append(torch.addmm(b, inputs[-1], w.t()))
        grad = torch.randn_like(inputs[-1])
        for k in range(len(weights) - 1, -1, -1):
            torch.mm(grad.t(), inputs[k])  # weight gradient
            grad.sum(0)  # bias gradient
            if k:
                grad = grad @ weights[k][0]  # input gradient

    params = [p.detach().clone() for p in model.parameters()]
    for p in params:
        p.grad = torch.randn_like(p)
    optimizer = torch_optimizer(OptimizerSpec("adam", 1e-3), params, fused=True)
    for p in params:
        optimizer.state[p] = new_state(OptimizerSpec("adam", 1e-3), p)
    timed = interleaved_medians({"products": products, "adam": optimizer.step}, rounds, inner=20)
    return {name: result["median_s"] for name, result in timed.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--counts", default="1,2,4,8,16,32")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--allocator", choices=("retain", "default"), default="retain")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default="benchmarks/results/packing_roofline.json")
    args = parser.parse_args(argv)
    process = setup_process(args.threads, args.allocator)
    rounds = 2 if args.quick else args.rounds
    counts = [1, 2] if args.quick else [int(c) for c in args.counts.split(",")]
    b = SAME_BATCH
    shapes = [
        (1024, 1024, 1024),
        (b, 64, 256),
        (b, 256, 256),
        (b, 256, 10),
        (256, b, 256),
        (b, 256, 2048),
    ]
    matmul = matmul_flops_per_s(shapes, rounds)
    peak = max(r["flops_per_s"] for r in matmul)
    architectures, stream = workload_setup("mlp3", "digits", {})
    flops = training_flops(architectures, stream)
    rows = []
    for n in counts:
        specs = trial_set(n, "same", "same")
        ragged = PackSettings(batch_mode="ragged")
        ragged_autograd = PackSettings(batch_mode="ragged", backward="autograd")
        variants = {
            "pack": packed(specs, architectures, stream).train_step,
            "pack_ragged": packed(specs, architectures, stream, ragged).train_step,
            "pack_ragged_autograd": packed(
                specs, architectures, stream, ragged_autograd
            ).train_step,
            "alone": Alone(specs, architectures, stream, fused=False),
            "alone_fused": Alone(specs, architectures, stream, fused=True),
        }
        timed = interleaved_medians(variants, rounds, inner=3)
        row = {"n": n}
        for name, result in timed.items():
            achieved = n * flops / result["median_s"]
            row[name] = {
                "step_s": result["median_s"],
                "flops_per_s": achieved,
                "fraction_of_peak": achieved / peak,
            }
        rows.append(row)
        print(
            f"n={n:2d}  pack {row['pack']['flops_per_s'] / 1e9:6.1f} GFLOP/s ({row['pack']['fraction_of_peak']:.0%})"
            f"  ragged {row['pack_ragged']['flops_per_s'] / 1e9:6.1f}"
            f" (autograd {row['pack_ragged_autograd']['flops_per_s'] / 1e9:6.1f})"
            f"  alone {row['alone']['flops_per_s'] / 1e9:6.1f}  alone fused {row['alone_fused']['flops_per_s'] / 1e9:6.1f}"
            f"  (peak {peak / 1e9:.1f})",
            file=sys.stderr,
            flush=True,
        )
    floor = floor_seconds(architectures, b, rounds)
    floor_s = floor["products"] + floor["adam"]
    alone = {k: min(r[k]["step_s"] / r["n"] for r in rows) for k in ("alone", "alone_fused")}
    bound = {k: v / floor_s for k, v in alone.items()}
    print(
        f"floor per trial-step {floor_s * 1e3:.3f} ms (products {floor['products'] * 1e3:.3f}, "
        f"adam {floor['adam'] * 1e3:.3f}); largest possible speedup over alone "
        f"{bound['alone']:.2f}x (default optim), {bound['alone_fused']:.2f}x (fused)",
        file=sys.stderr,
    )
    body = {
        "process": process,
        "floor_s_per_trial_step": floor_s,
        "floor_parts_s": floor,
        "alone_best_s_per_trial_step": alone,
        "largest_speedup_over_alone": bound,
        "matmul": matmul,
        "peak_matmul_flops_per_s": peak,
        "training_flops_per_trial_step": flops,
        "batch": b,
        "packs": rows,
    }
    write_report(args.out, "packing_roofline", argv, body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
