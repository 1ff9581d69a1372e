"""Predicted against real iteration time of data-parallel training on this machine (Srift §5.3).

For each workload, per-process batch and world size 1-4, real PyTorch DDP
training (gloo, one thread per process, every process on this host) is timed,
and the iteration time is predicted from the workload's profile, the learned
comm model of this host (``benchmarks/plan/comm_model.py`` trains it from real
allreduce probes) and Srift's simulator. The processes share this host's two
vCPUs, so each one's "device" is a share of the host: its peak rates are
measured with that many single-threaded processes running at once
(``profiling.peaks.measure_shared_peaks``), and the profile is scaled to it
with the roofline ratio (perf/roofline.py). Variants, side by side:

- ``srift``: Srift's simulator as written, compute from the profile alone;
- ``shared``: + the per-process device of N co-located processes;
- ``shared+ddp``: + DDP's gradient buckets, its copies into and out of them, and the
  optimizer step in ``t_iter``;
- ``shared+ddp+serial``: + the exchange after backward rather than beside it, since
  gloo's reductions need the same cores as backward when the processes fill the host;
- ``shared+ddp-probe``: beyond Srift, the exchange, DDP's copies and the wait for the
  slowest rank together from this host's DDP probe (``profiling/ddp_probe.py``, measured
  in the same run unless ``--ddp-probe FILE`` gives one): the shared compute plus the
  probed overhead at this gradient size and compute time, plus the optimizer step
  (``rightsize plan --exchange ddp-probe``).

Usage:
    python benchmarks/plan/planner_accuracy.py --comm-model benchmarks/results/comm_learned_model.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.lib.envelope import write_report
from benchmarks.lib.errors import rows_mape
from rightsize.core.ports import free_port
from rightsize.core.units import parse_memory
from rightsize.perf.comm import Link
from rightsize.perf.comm_learned import LearnedCommModel
from rightsize.perf.compute import ComputeModel
from rightsize.perf.ddp_overhead import DdpOverheadModel
from rightsize.perf.iteration import (
    ComputeDraw,
    ddp_copy_s,
    gradient_bytes,
    is_ddp,
    simulate_iteration,
    straggler_compute,
)
from rightsize.perf.roofline import DeviceRates, RooflineCompute
from rightsize.planning.options import grads_of
from rightsize.profiling.bmax import BmaxSearch
from rightsize.profiling.ddp_probe import DdpProbeSettings, probe_ddp
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
#: variant -> the planner's exchange mode (perf/iteration.py) it predicts with
VARIANTS = {
    "srift": "per-layer",
    "shared": "per-layer",
    "shared+ddp": "ddp-buckets",
    "shared+ddp+serial": "ddp-serial",
    "shared+ddp-probe": "ddp-probe",
}
ATTEMPTS = 3


def _ddp_rank(rank, world, port, name, dataset, batches, warmup, rounds, out) -> None:
    """Times every batch size in one process group, interleaved as the profiler does.

    Each round visits the batches in a shuffled order (the same on every rank, so
    the collectives match) with an untimed step after each switch: the machine's
    drift then lands on all batch sizes alike instead of bending the curve.
    """
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    workload = WorkloadRegistry().get(name, dataset)
    model = torch.nn.parallel.DistributedDataParallel(workload.make_model(0))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    data = {b: workload.example_batch(b) for b in batches}

    def step(batch: int) -> float:
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        workload.loss(model, data[batch]).backward()
        optimizer.step()
        return time.perf_counter() - start

    for batch in batches:
        for _ in range(warmup):
            step(batch)
    times = {b: [] for b in batches}
    order = np.random.default_rng(0)
    for _ in range(rounds):
        for batch in order.permutation(batches).tolist():
            step(batch)
            times[batch].append(step(batch))
    dist.barrier()  # no rank tears gloo down while another still talks to it
    dist.destroy_process_group()
    if rank == 0:
        Path(out).write_text(json.dumps({b: statistics.median(t) for b, t in times.items()}))


def measure_ddp(name: str, dataset: str, world: int, batches, warmup: int, rounds: int) -> dict:
    """Median step seconds of real DDP training per per-process batch."""
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "t"
        for attempt in range(ATTEMPTS):
            args = (world, free_port(), name, dataset, list(batches), warmup, rounds, str(out))
            try:
                mp.start_processes(_ddp_rank, args=args, nprocs=world, start_method="spawn")
                break
            except mp.ProcessExitedException as exc:  # gloo aborts now and then on teardown
                print(f"  world {world}: attempt {attempt + 1} failed ({exc})", file=sys.stderr)
        else:
            raise RuntimeError(f"DDP with {world} processes failed {ATTEMPTS} times")
        return {int(b): t for b, t in json.loads(out.read_text()).items()}


def predict(profile: Profile, alone: DeviceRates, shared: DeviceRates, world: int, batch: int,
            comm, variant: str, seed: int, ddp_probe: DdpOverheadModel) -> float:  # fmt: skip
    """``alone`` and ``shared``: one process's sustained rates with 1 and ``world`` running."""
    measured = ComputeModel.from_profile(profile)
    compute = measured if variant == "srift" else RooflineCompute(profile, measured, alone, shared)
    mean = compute.predict(batch)
    total = straggler_compute([ComputeDraw(mean.total_s, profile.compute_cv, world)], 200,
                              np.random.default_rng(seed))  # fmt: skip
    grads = grads_of(profile, batch)
    if VARIANTS[variant] == "ddp-probe":  # as planning/estimate.py predicts it
        overhead = ddp_probe.overhead_s(world, gradient_bytes(grads), mean.total_s)
        return total + overhead + compute.optimizer_s
    backward = total * mean.backward_s / mean.total_s
    link = Link(cpu_model(), 0.0, profile.device.threads, (meminfo("MemTotal") or 0) / 2**30)
    exchange = VARIANTS[variant]
    ddp = is_ddp(exchange)
    result = simulate_iteration(
        total - backward, backward, grads, world, comm, link,
        optimizer_s=compute.optimizer_s if ddp else 0.0, exchange=exchange,
        copy_s=ddp_copy_s(grads, shared.mem_bytes_per_s) if ddp else 0.0,
    )  # fmt: skip
    return result.iteration_s


def _ddp_probe(path: str | None, worlds: list[int], save_to: Path) -> DdpOverheadModel:
    """The saved probe at ``path``, or a fresh one of these world sizes (saved to ``save_to``)."""
    if path:
        return DdpOverheadModel.load(path)
    with tempfile.TemporaryDirectory() as scratch:
        settings = DdpProbeSettings(world_sizes=tuple(sorted({1, *worlds})))
        records = probe_ddp(settings, Path(scratch), lambda line: print(line, file=sys.stderr))
    model = DdpOverheadModel(records, settings.host_name())
    model.save(save_to)
    return model


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--comm-model",
        required=True,
        help="learned comm model of this host (benchmarks/plan/comm_model.py)",
    )
    parser.add_argument("--workloads", default=",".join(CASES))
    parser.add_argument("--worlds", default="1,2,3,4")
    parser.add_argument("--rounds", type=int, default=15, help="timed steps per batch size")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--ddp-probe", help="a saved DDP probe (default: probe in this run)")
    parser.add_argument("--out", default="benchmarks/results/planner_accuracy.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    comm = LearnedCommModel.load(args.comm_model)
    if cpu_model() not in comm.hosts:  # its loopback "link" has no rated bandwidth to fall back on
        print(f"error: --comm-model {args.comm_model} was probed on {', '.join(comm.hosts)}, "
              f"not on this host ({cpu_model()}): probe this one first "
              "(python benchmarks/plan/comm_model.py)", file=sys.stderr)  # fmt: skip
        return 2
    worlds = [int(w) for w in args.worlds.split(",")]
    ddp_probe = _ddp_probe(args.ddp_probe, worlds, Path(args.out).with_suffix(".ddp-probe.json"))
    shared = {}
    for n in sorted({1, *worlds}):  # 1: the same measure for the profile's own device
        peaks = measure_shared_peaks(n)
        shared[n] = DeviceRates(f"{n} processes", peaks.flops_per_s, peaks.mem_bytes_per_s, 2**34)
    rows = []
    for name in args.workloads.split(","):
        dataset, limit, batches = CASES[name]
        settings = ProfilerSettings(repeats=10, search=BmaxSearch(max_batch=max(batches) * 2),
                                    sampling="dense")  # as measured before srift became the default
        profile = Profiler(torch.device("cpu"), settings).run(
            WorkloadRegistry().get(name, dataset), parse_memory(limit)
        )
        for world in worlds:
            measured = measure_ddp(name, dataset, world, batches, args.warmup, args.rounds)
            for batch in batches:
                actual = measured[batch]
                predicted = {
                    v: predict(
                        profile, shared[1], shared[world], world, batch, comm, v, 0, ddp_probe
                    )  # fmt: skip
                    for v in VARIANTS
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
    summary = {v: rows_mape(rows, f"{v}_s") for v in VARIANTS}
    by_world = {
        str(w): {v: rows_mape([r for r in rows if r["world"] == w], f"{v}_s") for v in VARIANTS}
        for w in worlds
    }
    by_workload = {
        name: {
            v: rows_mape([r for r in rows if r["workload"] == name], f"{v}_s") for v in VARIANTS
        }
        for name in args.workloads.split(",")
    }
    report = {
        "benchmark": "planner_accuracy",
        "shared_peaks": {str(n): {"flops_per_s": r.flops_per_s, "mem_bytes_per_s": r.mem_bytes_per_s}
                         for n, r in shared.items()},  # fmt: skip
        "ddp_probe": [r.to_dict() for r in ddp_probe.records],
        "rows": rows, "mape_percent": summary, "mape_percent_by_world": by_world,
        "mape_percent_by_workload": by_workload, "simulated": False,
    }  # fmt: skip
    write_report(args.out, report)
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
