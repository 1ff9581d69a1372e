"""The device's achievable peak rates: matmul FLOP/s and memory-copy bandwidth.

Roofline scaling (perf/roofline.py) compares a measured profile's device with a
target accelerator by their peak compute and memory rates. Datasheets give the
target's; the profiling device's are measured here, the best of a few trials
of a large fp32 matrix product and of a large tensor copy, with the profile's
thread count.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import torch

from rightsize.profiling.timing import Stopwatch

MATMUL_SIZE = 1024  # 2·n³ = 2.1 GFLOP per product: long enough to time, short enough to repeat
COPY_BYTES = 256 * 2**20  # far beyond any cache


@dataclass(frozen=True)
class DevicePeaks:
    flops_per_s: float
    mem_bytes_per_s: float


def measure_peaks(device: torch.device, trials: int = 5, sustained: bool = False) -> DevicePeaks:
    """Best-of-``trials`` fp32 matmul FLOP/s and copy bandwidth (read + write bytes) on ``device``.

    ``sustained``: the mean over the trials instead of the best, for a device shared by
    more processes than cores, where the best trial is one that happened to run alone.
    """
    stopwatch = Stopwatch(device)
    a = torch.randn(MATMUL_SIZE, MATMUL_SIZE, device=device)
    b = torch.randn(MATMUL_SIZE, MATMUL_SIZE, device=device)
    src = torch.empty(COPY_BYTES // 4, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    torch.mm(a, b), dst.copy_(src)  # warm-up
    mm_s, copy_s = [], []
    for _ in range(trials):
        start = stopwatch.now()
        torch.mm(a, b)
        mm_s.append(stopwatch.now() - start)
        start = stopwatch.now()
        dst.copy_(src)
        copy_s.append(stopwatch.now() - start)
    pick = statistics.fmean if sustained else min
    return DevicePeaks(2 * MATMUL_SIZE**3 / pick(mm_s), 2 * COPY_BYTES / pick(copy_s))


def _peaks_worker(rank: int, barrier, results, trials: int) -> None:
    torch.set_num_threads(1)
    barrier.wait()  # all processes measure at the same time
    peaks = measure_peaks(torch.device("cpu"), trials, sustained=True)
    results[rank] = (peaks.flops_per_s, peaks.mem_bytes_per_s)


def measure_shared_peaks(processes: int, trials: int = 20) -> DevicePeaks:
    """Sustained rates one single-threaded process gets while ``processes`` such processes run
    at once (the mean over ``trials``, not the best: with more processes than cores the best
    trial is one that happened to have a core to itself).

    On a host whose cores (or hyperthreads) are shared, a data-parallel job with
    one process per rank sees a slower device than a profile taken alone; these
    rates describe that share of the host, for roofline scaling (perf/roofline.py).
    """
    import torch.multiprocessing as mp

    context = mp.get_context("spawn")
    with context.Manager() as manager:
        barrier, results = manager.Barrier(processes), manager.dict()
        workers = [context.Process(target=_peaks_worker, args=(r, barrier, results, trials))
                   for r in range(processes)]  # fmt: skip
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        rates = list(results.values())
    flops = sorted(r[0] for r in rates)[len(rates) // 2]
    mem = sorted(r[1] for r in rates)[len(rates) // 2]
    return DevicePeaks(flops, mem)
