"""Probing what a DDP step costs beyond its compute, with the processes co-located (beyond Srift).

Srift's comm probe (``comm_probe.py``) times allreduces back to back, every
rank starting together after a barrier. A training step issues its allreduce
right after its own backward, on cores the other ranks' backward is still
using, and waits for the slowest rank; on this host those costs are larger
than the probed allreduce (docs/planning.md, "Limits"). This probe measures
them as training incurs them: ``world`` processes train a synthetic model —
a chain of matrix products with no parameters (the compute) and one
parameter of ``grad_bytes`` (the gradient to exchange, ready when backward
ends) — once plainly, side by side without talking, and once under
DistributedDataParallel. The DDP step's extra seconds over the plain one are
its *overhead*: bucket copies, allreduce, waiting for the slowest rank. Each
point is measured in ``rounds`` fresh process groups (as the comm probe
does: the same setup measures differently from spawn to spawn) with plain
and DDP steps interleaved, so drift lands on both.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from rightsize.core.errors import ResourceError
from rightsize.core.ports import free_port
from rightsize.profiling.device import check_local_ranks, cpu_model

CHAIN_WIDTH = 128  # the compute chain's square matrices
CHAIN_DEPTH = 8  # products per forward pass (and as many in backward)


@dataclass(frozen=True)
class DdpProbeRecord:
    """One measured point: medians over the timed steps, then over rounds."""

    world: int
    grad_bytes: int
    rows: int  # the compute chain's input rows: sets how long the compute takes
    compute_s: float  # a plain step, the processes side by side
    ddp_s: float  # the same step under DDP

    @property
    def overhead_s(self) -> float:
        return max(0.0, self.ddp_s - self.compute_s)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class DdpProbeSettings:
    world_sizes: tuple[int, ...] = (1, 2, 3, 4)
    grad_bytes: tuple[int, ...] = (2**16, 2**20, 2**22, 2**24, 2**26)
    rows: tuple[int, ...] = (32, 256, 2048)
    warmup: int = 3
    steps: int = 15
    rounds: int = 2
    host: str = ""  # what the planner matches instance types by; defaults to this CPU's model

    def host_name(self) -> str:
        return self.host or cpu_model()

    def validate(self) -> None:
        """Raises ResourceError for settings no probe can run with."""
        if not self.world_sizes or min(self.world_sizes) < 1:
            raise ResourceError("world sizes must be at least 1")
        if not self.grad_bytes or min(self.grad_bytes) < 4 or not self.rows or min(self.rows) < 1:
            raise ResourceError("gradient sizes must be >= 4 bytes and rows >= 1")
        if self.steps < 1 or self.rounds < 1 or self.warmup < 0:
            raise ResourceError("steps and rounds must be at least 1, warm-up at least 0")
        for world in self.world_sizes:  # a rank holds its gradients, and DDP's bucket copies
            check_local_ranks(world, 2 * max(self.grad_bytes))


class _Chain(torch.nn.Module):
    """Compute without parameters: ``CHAIN_DEPTH`` products with a constant matrix.

    The matrix is a plain attribute, not a buffer, so DDP has nothing to broadcast.
    """

    def __init__(self) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.matrix = torch.randn(CHAIN_WIDTH, CHAIN_WIDTH, generator=generator) / CHAIN_WIDTH**0.5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(CHAIN_DEPTH):
            x = x @ self.matrix
        return x


class _Probe(torch.nn.Module):
    """The gradient first in forward, so it is ready when backward ends (DDP's worst case)."""

    def __init__(self, grad_bytes: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(max(1, grad_bytes // 4)))
        self.chain = _Chain()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.chain(x + self.weight.sum()).square().mean()


def _median_step_s(model: torch.nn.Module, x: torch.Tensor, steps: int, warmup: int) -> float:
    def step() -> float:
        start = time.perf_counter()
        model.zero_grad(set_to_none=True)
        model(x).backward()
        return time.perf_counter() - start

    for _ in range(warmup):
        step()
    return statistics.median(step() for _ in range(steps))


def _rank(rank: int, world: int, port: int, settings: DdpProbeSettings, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    lines = []
    try:
        for grad_bytes in settings.grad_bytes:
            plain = _Probe(grad_bytes)
            ddp = torch.nn.parallel.DistributedDataParallel(_Probe(grad_bytes))
            for rows in settings.rows:
                x = torch.randn(rows, CHAIN_WIDTH, generator=torch.Generator().manual_seed(rank))
                dist.barrier()  # the plain steps run side by side too
                compute = _median_step_s(plain, x, settings.steps, settings.warmup)
                dist.barrier()
                ddp_step = _median_step_s(ddp, x, settings.steps, settings.warmup)
                lines.append(f"{grad_bytes} {rows} {compute!r} {ddp_step!r}")
            del plain, ddp
    finally:
        dist.barrier()  # no rank tears gloo down while another still talks to it
        dist.destroy_process_group()
    if rank == 0:
        Path(out).write_text("\n".join(lines))


def probe_ddp(
    settings: DdpProbeSettings, scratch: Path, progress: Callable[[str], None] = lambda _: None
) -> list[DdpProbeRecord]:
    """Every (world, gradient size, rows) point, medians over ``settings.rounds`` process groups."""
    settings.validate()
    per_point: dict[tuple[int, int, int], list[tuple[float, float]]] = {}
    for round_index in range(settings.rounds):
        for world in settings.world_sizes:
            progress(f"DDP probe round {round_index + 1}/{settings.rounds}: world size {world}")
            out = scratch / f"ddp-probe-{round_index}-{world}.txt"
            mp.start_processes(_rank, args=(world, free_port(), settings, str(out)),
                               nprocs=world, start_method="spawn")  # fmt: skip
            for line in out.read_text().splitlines():
                grad_bytes, rows, compute, ddp = line.split()
                key = (world, int(grad_bytes), int(rows))
                per_point.setdefault(key, []).append((float(compute), float(ddp)))
    return [
        DdpProbeRecord(world, grad_bytes, rows,
                       statistics.median(c for c, _ in times), statistics.median(d for _, d in times))
        for (world, grad_bytes, rows), times in sorted(per_point.items())
    ]  # fmt: skip


def records_from_dicts(rows: list[dict]) -> list[DdpProbeRecord]:
    return [DdpProbeRecord(**row) for row in rows]
