"""How noisy is a training step's time on this CPU, with 1 and with 2 torch threads?

Times repeated training steps of one workload at a few batch sizes, once per
thread count, and reports per batch the median, the minimum and the coefficient
of variation (std/mean), plus the CPU steal time the kernel counted meanwhile.
This is why the profiler times batch sizes interleaved and why the accuracy
benchmark runs with one thread (docs/profiling.md).

Usage:
    python benchmarks/plan/cpu_noise.py --out benchmarks/results/cpu_noise.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.lib.envelope import write_report
from rightsize.workloads import WorkloadRegistry


def steal_jiffies() -> int:
    with open("/proc/stat") as handle:
        return int(handle.readline().split()[8])


def measure(workload_name: str, dataset: str, batches: list[int], threads: int, steps: int) -> dict:
    torch.set_num_threads(threads)
    workload = WorkloadRegistry().get(workload_name, dataset)
    model = workload.make_model(0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    rows, steal_before = [], steal_jiffies()
    for size in batches:
        batch = workload.example_batch(size)
        times = []
        for i in range(steps + 3):
            optimizer.zero_grad(set_to_none=True)
            start = time.perf_counter()
            workload.loss(model, batch).backward()
            elapsed = time.perf_counter() - start
            optimizer.step()
            if i >= 3:  # warm-up
                times.append(elapsed)
        mean = statistics.fmean(times)
        rows.append({
            "batch": size,
            "median_s": statistics.median(times),
            "min_s": min(times),
            "cv": statistics.stdev(times) / mean,
        })  # fmt: skip
    return {"threads": threads, "rows": rows, "steal_jiffies": steal_jiffies() - steal_before}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workload", default="mlp3")
    parser.add_argument("--dataset", default="synthetic-cifar")
    parser.add_argument("--batches", default="12,48,96,384")
    parser.add_argument("--steps", type=int, default=25)
    parser.add_argument("--out", default="benchmarks/results/cpu_noise.json")
    args = parser.parse_args(argv)
    batches = [int(b) for b in args.batches.split(",")]
    results = [measure(args.workload, args.dataset, batches, t, args.steps) for t in (2, 1)]
    for result in results:
        for row in result["rows"]:
            print(f"threads {result['threads']}  batch {row['batch']:>5}  median "
                  f"{row['median_s'] * 1e3:7.2f} ms  cv {row['cv']:.2f}", file=sys.stderr)  # fmt: skip
    report = {
        "benchmark": "cpu_noise",
        "workload": args.workload,
        "dataset": args.dataset,
        "steps": args.steps,
        "results": results,
        "simulated": False,
    }
    out = Path(args.out)
    write_report(out, report)
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
