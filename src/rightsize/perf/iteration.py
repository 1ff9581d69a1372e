"""Srift's iteration simulator (§4.3): ``t_iter = t_fw(B) + max(t_bw(B), t_pe)``.

The compute phase is set by the slowest VM: each VM draws, per iteration, a
compute time from a normal distribution with the predicted mean and the
profiled spread (std/mean), the maximum over VMs is that iteration's compute,
and the mean over iterations is the prediction. Heterogeneous configurations
therefore wait for their slowest instance type.

The parameter exchange is simulated with an event queue from the start of the
backward pass: each trainable layer's allreduce starts when its gradient is
ready (its profiled ready fraction times ``t_bw``), queries the comm model for
its bus bandwidth (size rounded up to a power of two), and shares the link's
capacity ``b_cap`` fairly when the transfers together ask for more (Srift
eq. 2); every change of concurrency re-times the active transfers. ``t_pe`` is
when the last transfer finishes.

Exchange modes (:data:`EXCHANGES`), each selectable and measured side by side
in ``benchmarks/plan/planner_accuracy.py``:

- ``per-layer`` — Srift as written: one allreduce per layer, overlapping backward;
- ``ddp-buckets`` — what a PyTorch DDP step does: layers grouped into DDP's
  gradient buckets (25 MiB, the first 1 MiB), the gradients copied into and out
  of the buckets, and the optimizer step, with the exchange overlapping backward;
- ``ddp-serial`` — the same with the exchange after backward: on a CPU host
  whose processes fill its cores, gloo's reductions need the cores backward is
  using, so overlapping them gains nothing.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rightsize.perf.comm import CommModel, Link, round_up_pow2

DDP_BUCKET_BYTES = 25 * 2**20  # torch.nn.parallel.DistributedDataParallel bucket_cap_mb
DDP_FIRST_BUCKET_BYTES = 1 * 2**20  # DDP's smaller first bucket
COPY_TRAFFIC = 2  # bytes moved (read + write) per byte copied
EXCHANGES = ("per-layer", "ddp-buckets", "ddp-serial")


@dataclass(frozen=True)
class LayerGrad:
    """One gradient to exchange: its bytes and when it is ready, as a fraction of backward."""

    param_bytes: int
    ready_fraction: float


@dataclass(frozen=True)
class ComputeDraw:
    """One instance type's share of the compute phase: ``count`` VMs with mean and spread."""

    mean_s: float
    cv: float
    count: int


def straggler_compute(
    draws: Sequence[ComputeDraw], iterations: int, rng: np.random.Generator
) -> float:
    """Mean over ``iterations`` of the slowest VM's sampled compute time (Srift §4.3)."""
    per_iteration = np.zeros(iterations)
    for draw in draws:
        if draw.count <= 0:
            continue
        samples = rng.normal(draw.mean_s, draw.cv * draw.mean_s, size=(iterations, draw.count))
        per_iteration = np.maximum(per_iteration, samples.max(axis=1))
    return float(np.maximum(per_iteration, 0.0).mean())


def ddp_buckets(layers: Sequence[LayerGrad], cap_bytes: int = DDP_BUCKET_BYTES,
                first_cap_bytes: int = DDP_FIRST_BUCKET_BYTES) -> list[LayerGrad]:  # fmt: skip
    """Layers grouped in gradient-ready order into DDP's buckets; a bucket is ready with its last layer."""
    buckets: list[LayerGrad] = []
    size, ready, cap = 0, 0.0, first_cap_bytes
    for layer in sorted(layers, key=lambda g: g.ready_fraction):
        size += layer.param_bytes
        ready = max(ready, layer.ready_fraction)
        if size >= cap:
            buckets.append(LayerGrad(size, ready))
            size, ready, cap = 0, 0.0, cap_bytes
    if size:
        buckets.append(LayerGrad(size, ready))
    return buckets


def gradient_bytes(layers: Sequence[LayerGrad]) -> int:
    """Bytes of every gradient to exchange."""
    return sum(g.param_bytes for g in layers)


def ddp_copy_s(layers: Sequence[LayerGrad], mem_bytes_per_s: float) -> float:
    """DDP copies every gradient into its bucket before the allreduce and back after
    (``gradient_as_bucket_view=False``, PyTorch's default), on the compute device's own time.

    ``mem_bytes_per_s`` counts bytes read plus bytes written (a copy of ``b`` bytes
    moves ``2 b``; that is how the profiler measures it and how accelerators are
    rated), so the two copies move four times the gradient bytes.
    """
    return 2 * COPY_TRAFFIC * gradient_bytes(layers) / mem_bytes_per_s


@dataclass
class _Transfer:
    remaining: float  # bus bytes still to move: 2 s (n-1) / n
    wanted: float  # bus bandwidth the comm model predicts for this transfer alone
    rate: float = 0.0


def exchange_time(layers: Sequence[LayerGrad], backward_s: float, world: int,
                  comm: CommModel, link: Link) -> float:  # fmt: skip
    """``t_pe``: seconds from the start of backward until the last allreduce finishes."""
    if world <= 1 or not layers:
        return 0.0
    capacity = comm.capacity(world, link)
    starts = sorted((g.ready_fraction * backward_s, i, g.param_bytes) for i, g in enumerate(layers))
    heapq.heapify(starts)
    active: dict[int, _Transfer] = {}
    now = 0.0
    while starts or active:
        finish_in = min((t.remaining / t.rate for t in active.values()), default=float("inf"))
        next_start = starts[0][0] if starts else float("inf")
        step = min(finish_in, next_start - now)
        for transfer in active.values():
            transfer.remaining -= transfer.rate * step
        now += step
        for key in [k for k, t in active.items() if t.remaining <= 1e-9 * max(1.0, t.wanted)]:
            del active[key]
        while starts and starts[0][0] <= now + 1e-15:
            _, key, size = heapq.heappop(starts)
            wanted = comm.bus_bandwidth(
                round_up_pow2(size), world, link, concurrent=len(active) + 1
            )
            if not wanted > 0:
                raise ValueError(
                    f"comm model {comm.kind} predicted bandwidth {wanted} for {size} B"
                )
            active[key] = _Transfer(2 * size * (world - 1) / world, wanted)
        _share(active, capacity)
    return now


def _share(active: dict[int, _Transfer], capacity: float) -> None:
    """Srift eq. 2: each gets what it asks for unless together they exceed ``b_cap``."""
    if sum(t.wanted for t in active.values()) < capacity:
        for transfer in active.values():
            transfer.rate = transfer.wanted
        return
    fair = capacity / len(active)
    for transfer in active.values():
        transfer.rate = min(transfer.wanted, fair)


@dataclass(frozen=True)
class IterationTime:
    """A predicted iteration and its parts, in seconds."""

    iteration_s: float
    forward_s: float
    backward_s: float
    exchange_s: float  # t_pe, from the start of backward (from its end when serial)
    optimizer_s: float


def is_ddp(exchange: str) -> bool:
    """Whether the mode models a DDP step (buckets, bucket copies, optimizer step)."""
    return exchange.startswith("ddp-")


def exchange_s(layers: Sequence[LayerGrad], backward_s: float, world: int, comm: CommModel,
               link: Link, exchange: str = "per-layer") -> float:  # fmt: skip
    """``t_pe`` of an exchange mode: from the start of backward, or from its end if serial."""
    if exchange not in EXCHANGES:
        raise ValueError(f"exchange must be one of {EXCHANGES}, got {exchange!r}")
    grads = ddp_buckets(layers) if is_ddp(exchange) else layers
    # a serial exchange starts when backward has ended: every gradient is ready at once
    ready_within_s = 0.0 if exchange == "ddp-serial" else backward_s
    return exchange_time(grads, ready_within_s, world, comm, link)


def combine(forward_s: float, backward_s: float, pe_s: float, exchange: str = "per-layer",
            optimizer_s: float = 0.0, copy_s: float = 0.0) -> IterationTime:  # fmt: skip
    """Srift's ``t_fw + max(t_bw, t_pe)`` (``t_fw + t_bw + t_pe`` when serial), + optimizer and copies."""
    if exchange == "ddp-serial":
        total = forward_s + backward_s + pe_s + optimizer_s + copy_s
    else:
        total = forward_s + max(backward_s, pe_s) + optimizer_s + copy_s
    return IterationTime(total, forward_s, backward_s, pe_s, optimizer_s + copy_s)


def simulate_iteration(
    forward_s: float,
    backward_s: float,
    layers: Sequence[LayerGrad],
    world: int,
    comm: CommModel,
    link: Link,
    optimizer_s: float = 0.0,
    exchange: str = "per-layer",
    copy_s: float = 0.0,
) -> IterationTime:
    """Srift's ``t_iter = t_fw + max(t_bw, t_pe)`` for one exchange mode (module docstring).

    Args:
        forward_s, backward_s: the compute phase, stragglers included (see
            :func:`straggler_compute`), split into forward and backward.
        layers: the gradients to exchange.
        optimizer_s, copy_s: the optimizer step and DDP's bucket copies
            (:func:`ddp_copy_s`); 0 in Srift's form.
    """
    pe = exchange_s(layers, backward_s, world, comm, link, exchange)
    return combine(forward_s, backward_s, pe, exchange, optimizer_s, copy_s)
