"""What rightsize torchrun's measuring hooks cost a training step, in-process.

A tiny step (a 20-feature linear model, batch 4, SGD, one thread, a DataLoader), timed
without the hooks and with them installed (``runtime/script_hooks.py``, with the launcher's
counters but no master): their cost per step is the difference. Rounds alternate.

    python benchmarks/torchrun/torchrun_hooks.py --out benchmarks/results/torchrun_hooks.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.lib.envelope import write_report
from benchmarks.lib.load import load_note
from rightsize.runtime import script_hooks
from rightsize.runtime.script_rank import Launcher
from rightsize.runtime.transport import Counters


class _Context:
    """What the launcher's counters live on (a node's context), without a master."""

    def __init__(self) -> None:
        self.counters, self.steps, self.samples = Counters(), 0, 0
        self.busy_s, self.counted_at, self.loss_sum, self.loss_n = 0.0, None, 0.0, 0
        self.apply_threads = None


class _Group:
    world = 2


def step_us(steps: int) -> float:
    """Microseconds per training step over ``steps`` steps."""
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(4096, 20), torch.randn(4096, 1))
    model = torch.nn.Linear(20, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    done, started = 0, time.perf_counter()
    while done < steps:
        for x, y in DataLoader(data, batch_size=4):
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
            done += 1
            if done >= steps:
                break
    return (time.perf_counter() - started) / steps * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--out", default="benchmarks/results/torchrun_hooks.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    step_us(200)  # warm up
    plain, hooked = [], []
    for _ in range(args.rounds):
        plain.append(step_us(args.steps))
        remove = script_hooks.install(Launcher(_Context(), _Group()))
        hooked.append(step_us(args.steps))
        remove()
    extra = [h - p for p, h in zip(plain, hooked, strict=True)]
    result = {
              "plain_us": plain, "hooked_us": hooked, "extra_us": extra,
              "plain_us_median": statistics.median(plain),
              "hooked_us_median": statistics.median(hooked),
              "extra_us_median": statistics.median(extra), "load": load_note()}  # fmt: skip
    write_report(args.out, result)
    print(f"{result['plain_us_median']:.1f} us a step plain, {result['hooked_us_median']:.1f} "
          f"hooked: {result['extra_us_median']:.1f} us the hooks; {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
