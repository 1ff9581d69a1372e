"""Probing real allreduce bandwidth with torch.distributed (Srift §4.2's grid probe).

For each world size, ``world`` processes join a process group (gloo on CPU,
NCCL when CUDA is present) and allreduce buffers from 4 B to 512 MB in powers of
two, ``concurrent`` at a time (Srift's "number of asynchronous transfers"),
after warm-up. Each (size, world, concurrency) point is timed on rank 0 after a
barrier; its median gives the bus bandwidth ``b_bus = 2 s (n-1) / (n t)`` of each
concurrent transfer. Every point is repeated ``rounds`` times in fresh process
groups, because Srift found the same setup measures differently from spawn to
spawn, and records carry Srift's host features for the learned model.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from rightsize.core.errors import ResourceError
from rightsize.core.ports import free_port
from rightsize.perf.comm import bus_bandwidth_from_time
from rightsize.profiling.device import check_local_ranks, cpu_model, meminfo


@dataclass(frozen=True)
class ProbeRecord:
    """One measured point, with Srift's features."""

    host: str
    cores: int
    memory_gib: float
    rated_gbps: float  # 0 where the provider rates nothing (a loopback probe)
    accelerator: str
    mtu_bytes: int
    backend: str
    size_bytes: int
    world: int
    concurrent: int
    seconds: float
    bus_bytes_per_s: float

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class ProbeSettings:
    world_sizes: tuple[int, ...] = (2, 3, 4)
    min_bytes: int = 4
    max_bytes: int = 512 * 2**20
    concurrency: tuple[int, ...] = (1, 2)
    warmup: int = 2
    repeats: int = 5
    rounds: int = 1
    min_seconds_per_point: float = 0.2  # keep repeating small buffers until this much is timed
    host: str = ""  # defaults to this machine's CPU model
    rated_gbps: float = 0.0

    def validate(self) -> None:
        """Raises ResourceError for settings no probe can run with."""
        if not self.world_sizes or min(self.world_sizes) < 2:
            raise ResourceError("world sizes must be at least 2 (an allreduce needs two peers)")
        if not 1 <= self.min_bytes <= self.max_bytes:
            raise ResourceError(
                f"buffer sizes must satisfy 1 <= min <= max, got {self.min_bytes}..{self.max_bytes}"
            )
        if not self.concurrency or min(self.concurrency) < 1 or self.repeats < 1 or self.rounds < 1:
            raise ResourceError("concurrency, repeats and rounds must be at least 1")
        for world in self.world_sizes:  # each rank holds a buffer per concurrent transfer
            check_local_ranks(world, self.max_bytes * max(self.concurrency))

    def sizes(self) -> list[int]:
        sizes, size = [], self.min_bytes
        while size <= self.max_bytes:
            sizes.append(size)
            size *= 2
        return sizes


def _time_point(buffers: list[torch.Tensor], settings: ProbeSettings) -> float:
    """Median seconds for ``len(buffers)`` concurrent allreduces to all finish."""

    def once() -> float:
        dist.barrier()
        start = time.perf_counter()
        for work in [dist.all_reduce(b, async_op=True) for b in buffers]:
            work.wait()
        return time.perf_counter() - start

    def agreed(more: bool) -> bool:
        # every rank must run the same number of collectives, so they vote (outside the timing)
        vote = torch.tensor([1.0 if more else 0.0], device=buffers[0].device)
        dist.all_reduce(vote, op=dist.ReduceOp.MAX)
        return bool(vote.item())

    for _ in range(settings.warmup):
        once()
    times: list[float] = []
    short = settings.min_seconds_per_point
    while agreed(len(times) < settings.repeats or (sum(times) < short and len(times) < 200)):
        times.append(once())
    return statistics.median(times)


def _worker(rank: int, world: int, port: int, settings: ProbeSettings, out: str) -> None:
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    device = (
        torch.device("cuda", rank % torch.cuda.device_count())
        if backend == "nccl"
        else torch.device("cpu")
    )
    torch.set_num_threads(1)
    dist.init_process_group(
        backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    lines = []
    try:
        for size in settings.sizes():
            for concurrent in settings.concurrency:
                buffers = [torch.ones(max(1, size // 4), device=device) for _ in range(concurrent)]
                seconds = _time_point(buffers, settings)
                lines.append((size, concurrent, seconds, backend))
                del buffers
    finally:
        dist.destroy_process_group()
    if rank == 0:
        Path(out).write_text("\n".join(f"{s} {c} {t!r} {b}" for s, c, t, b in lines))


def _host_features(settings: ProbeSettings) -> dict:
    mtu = 65536
    try:
        mtu = int(Path("/sys/class/net/lo/mtu").read_text())
    except (OSError, ValueError):
        pass
    return {
        "host": settings.host or cpu_model(),
        "cores": os.cpu_count() or 1,
        "memory_gib": (meminfo("MemTotal") or 0) / 2**30,
        "rated_gbps": settings.rated_gbps,
        "accelerator": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "",
        "mtu_bytes": mtu,
    }


def probe(
    settings: ProbeSettings, scratch: Path, progress: Callable[[str], None] = lambda _: None
) -> list[ProbeRecord]:
    """Run the grid probe; ``scratch`` is a directory for the ranks' result files."""
    host = _host_features(settings)
    records: list[ProbeRecord] = []
    for round_index in range(settings.rounds):
        for world in settings.world_sizes:
            progress(f"round {round_index + 1}/{settings.rounds}: world size {world}, "
                     f"{len(settings.sizes())} buffer sizes")  # fmt: skip
            out = scratch / f"probe-{round_index}-{world}.txt"
            mp.start_processes(_worker, args=(world, free_port(), settings, str(out)), nprocs=world,
                               start_method="spawn")  # fmt: skip
            records += _read(out, host, world)
    return records


def _read(path: Path, host: dict, world: int) -> list[ProbeRecord]:
    records = []
    for line in path.read_text().splitlines():
        size, concurrent, seconds, backend = line.split()
        size, concurrent, seconds = int(size), int(concurrent), float(seconds)
        # each of the concurrent transfers moved ``size`` bytes in ``seconds``
        bus = bus_bandwidth_from_time(size, world, seconds)
        records.append(ProbeRecord(**host, backend=backend, size_bytes=size, world=world,
                                   concurrent=concurrent, seconds=seconds, bus_bytes_per_s=bus))  # fmt: skip
    return records


def records_from_dicts(rows: Sequence[dict]) -> list[ProbeRecord]:
    return [ProbeRecord(**row) for row in rows]
