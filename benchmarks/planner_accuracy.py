"""Predicted against real iteration time of data-parallel training on this machine (Srift §5.3).

For each workload, per-process batch and world size 1-4, real PyTorch DDP
training (gloo, one thread per process, every process on this host) is timed,
and the iteration time is predicted from the workload's profile, the learned
comm model of this host (``benchmarks/comm_model.py`` trains it from real
allreduce probes) and Srift's simulator. The processes share this host's two
vCPUs, so each one's "device" is a share of the host: its peak rates are
measured with that many single-threaded processes running at once
(``profiling.peaks.measure_shared_peaks``), and the profile is scaled to it
with the roofline ratio (perf/roofline.py). Variants, side by side:

- ``srift``: Srift's simulator as written, compute from the profile alone;
- ``shared``: + the per-process device of N co-located processes;
- ``shared+ddp``: + DDP's gradient buckets and the optimizer step in ``t_iter``.

Usage:
    python benchmarks/planner_accuracy.py --comm-model benchmarks/results/comm-model.json
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from rightsize.core.units import parse_memory
from rightsize.perf.comm import Link
from rightsize.perf.comm_learned import LearnedCommModel
from rightsize.perf.compute import ComputeModel
from rightsize.perf.iteration import ComputeDraw, simulate_iteration, straggler_compute
from rightsize.perf.roofline import DeviceRates, RooflineCompute
from rightsize.planning.options import grads_of
from rightsize.profiling.bmax import BmaxSearch
from rightsize.profiling.device import cpu_model, meminfo
from rightsize.profiling.peaks import measure_shared_peaks
from rightsize.profiling.profile import Profile
from rightsize.profiling.profiler import Profiler, ProfilerSettings
from rightsize.workloads import WorkloadRegistry

CASES = {  # workload: (dataset, memory limit for the profile, per-process batches)
    "mlp3": ("synthetic-cifar", "256Mi", (16, 64, 256)),
    "small-cnn": ("synthetic-cifar", "256Mi", (8, 32, 128)),
    "resnet18": ("synthetic-cifar", "384Mi", (8, 32, 64)),
}
VARIANTS = ("srift", "shared", "shared+ddp")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _ddp_rank(rank, world, port, name, dataset, batch, warmup, iterations, out) -> None:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    workload = WorkloadRegistry().get(name, dataset)
    model = torch.nn.parallel.DistributedDataParallel(workload.make_model(0))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    data = workload.example_batch(batch)
    times = []
    for _ in range(warmup + iterations):
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        workload.loss(model, data).backward()
        optimizer.step()
        times.append(time.perf_counter() - start)
    dist.destroy_process_group()
    if rank == 0:
        Path(out).write_text(repr(statistics.median(times[warmup:])))


def measure_ddp(
    name: str, dataset: str, world: int, batch: int, warmup: int, iterations: int
) -> float:
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "t"
        args = (world, _free_port(), name, dataset, batch, warmup, iterations, str(out))
        mp.start_processes(_ddp_rank, args=args, nprocs=world, start_method="spawn")
        return float(out.read_text())


def predict(
    profile: Profile, shared: DeviceRates, world: int, batch: int, comm, variant: str, seed: int
) -> float:
    measured = ComputeModel.from_profile(profile)
    alone = DeviceRates.of_profile(profile)
    compute = measured if variant == "srift" else RooflineCompute(profile, measured, alone, shared)
    mean = compute.predict(batch)
    total = straggler_compute([ComputeDraw(mean.total_s, profile.compute_cv, world)], 200,
                              np.random.default_rng(seed))  # fmt: skip
    backward = total * mean.backward_s / mean.total_s
    link = Link(cpu_model(), 0.0, profile.device.threads, (meminfo("MemTotal") or 0) / 2**30)
    ddp = variant == "shared+ddp"
    result = simulate_iteration(
        total - backward, backward, grads_of(profile, batch), world, comm, link,
        optimizer_s=compute.optimizer_s if ddp else 0.0, exchange="ddp-buckets" if ddp else "per-layer",
    )  # fmt: skip
    return result.iteration_s


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--comm-model",
        required=True,
        help="learned comm model of this host (benchmarks/comm_model.py)",
    )
    parser.add_argument("--workloads", default=",".join(CASES))
    parser.add_argument("--worlds", default="1,2,3,4")
    parser.add_argument("--iterations", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--out", default="benchmarks/results/planner_accuracy.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    comm = LearnedCommModel.load(args.comm_model)
    worlds = [int(w) for w in args.worlds.split(",")]
    shared = {}
    for n in worlds:
        peaks = measure_shared_peaks(n)
        shared[n] = DeviceRates(f"{n} processes", peaks.flops_per_s, peaks.mem_bytes_per_s, 2**34)
    rows = []
    for name in args.workloads.split(","):
        dataset, limit, batches = CASES[name]
        settings = ProfilerSettings(repeats=10, search=BmaxSearch(max_batch=max(batches) * 2))
        profile = Profiler(torch.device("cpu"), settings).run(
            WorkloadRegistry().get(name, dataset), parse_memory(limit)
        )
        for world in worlds:
            for batch in batches:
                actual = measure_ddp(name, dataset, world, batch, args.warmup, args.iterations)
                predicted = {
                    v: predict(profile, shared[world], world, batch, comm, v, 0) for v in VARIANTS
                }
                rows.append({"workload": name, "world": world, "batch": batch, "measured_s": actual,
                             **{f"{v}_s": p for v, p in predicted.items()}})  # fmt: skip
                errors = " ".join(
                    f"{v} {100 * abs(p - actual) / actual:5.1f}%" for v, p in predicted.items()
                )
                print(
                    f"{name:10} world {world} batch {batch:4}: {actual * 1e3:8.2f} ms  {errors}",
                    file=sys.stderr,
                )
    summary = {
        v: 100
        * statistics.fmean(abs(r[f"{v}_s"] - r["measured_s"]) / r["measured_s"] for r in rows)
        for v in VARIANTS
    }
    by_world = {
        str(w): {v: 100 * statistics.fmean(abs(r[f"{v}_s"] - r["measured_s"]) / r["measured_s"]
                                           for r in rows if r["world"] == w) for v in VARIANTS}
        for w in worlds
    }  # fmt: skip
    report = {
        "benchmark": "planner_accuracy",
        "command": "python benchmarks/planner_accuracy.py " + " ".join(argv or sys.argv[1:]),
        "shared_peaks": {str(n): {"flops_per_s": r.flops_per_s, "mem_bytes_per_s": r.mem_bytes_per_s}
                         for n, r in shared.items()},  # fmt: skip
        "rows": rows, "mape_percent": summary, "mape_percent_by_world": by_world, "simulated": False,
    }  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
