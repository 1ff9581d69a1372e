"""Timing one training step: forward, backward, optimizer, and when each layer's gradient is ready.

Latencies are wall-clock times around each phase, with the device synchronised
on CUDA so asynchronous kernels are counted where they run. Gradient-ready times
(Srift §4.1) come from ``register_post_accumulate_grad_hook``: the moment a
parameter's gradient is accumulated, relative to the start of the backward
pass; a layer is ready when its last parameter is. They are measured in separate
instrumented passes so the hooks' overhead never enters the latency samples, and
normalised by that pass's backward time so they extrapolate to other batches.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from rightsize.profiling.budget import RoundBudget
from rightsize.profiling.layers import Layer
from rightsize.workloads.datasets import Batch
from rightsize.workloads.workload import Workload


class Stopwatch:
    """``now()`` in seconds, synchronising CUDA first so queued work is included."""

    def __init__(self, device: torch.device) -> None:
        self._sync = device.type == "cuda"
        self._device = device

    def now(self) -> float:
        if self._sync:
            torch.cuda.synchronize(self._device)
        return time.perf_counter()


@dataclass
class StepRuns:
    """Per-repetition phase times of one batch size."""

    forward_s: list[float]
    backward_s: list[float]
    optimizer_s: list[float]

    @property
    def total_s(self) -> list[float]:
        return [f + b for f, b in zip(self.forward_s, self.backward_s, strict=True)]


def coefficient_of_variation(values: list[float]) -> float:
    """Standard deviation over mean (0 for fewer than two values)."""
    if len(values) < 2:
        return 0.0
    mean = statistics.fmean(values)
    return statistics.stdev(values) / mean if mean > 0 else 0.0


def time_interleaved(
    workload: Workload,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batches: dict[int, Batch],
    stopwatch: Stopwatch,
    warmup: int,
    repeats: int,
    seed: int = 0,
    on_round: Callable[[int], None] = lambda _done: None,
    settle: Callable[[], None] = lambda: None,
    budget: RoundBudget | None = None,
) -> dict[int, StepRuns]:
    """Time ``repeats`` steps of every batch size, round-robin in a shuffled order per round.

    On a shared machine the speed drifts (other tenants, hypervisor steal), so
    timing one batch size after another lets a slow minute land on one batch
    size only and bends the latency curve. Interleaving spreads it over all of
    them. After each switch one untimed step lets caches and the allocator settle,
    as they are in steady training at one batch size; before it, ``settle()`` gives
    the heap the last size left back (malloc_trim), or alternating sizes grow the
    process past any one step's peak (a resnet18-cifar profile bounded at 1 GiB
    went to 1107 MiB). ``on_round(rounds_done)`` is called after each round.

    With a ``budget`` a round after the first starts only if it fits in what is
    left, priced by the latest step of each batch (warm-up, then the rounds'):
    fewer rounds, said in the budget's cuts, never an overrun (profiling/budget.py).
    """
    runs = {size: StepRuns([], [], []) for size in batches}
    step_s: dict[int, float] = {}
    for size, batch in batches.items():
        settle()
        for _ in range(warmup):
            step_s[size] = sum(_timed_step(workload, model, optimizer, batch, stopwatch))
    order = list(batches)
    rng = random.Random(seed)
    for round_index in range(repeats):
        if budget is not None and round_index > 0 and not budget.next_round_fits(step_s):
            budget.stopped(round_index, repeats, sorted(batches))
            break
        rng.shuffle(order)
        for size in order:
            settle()
            _timed_step(workload, model, optimizer, batches[size], stopwatch)
            forward, backward, step = _timed_step(
                workload, model, optimizer, batches[size], stopwatch
            )
            runs[size].forward_s.append(forward)
            runs[size].backward_s.append(backward)
            runs[size].optimizer_s.append(step)
            step_s[size] = forward + backward + step
        on_round(round_index + 1)
    optimizer.zero_grad(set_to_none=True)
    return runs


def _timed_step(workload, model, optimizer, batch: Batch, stopwatch: Stopwatch):
    optimizer.zero_grad(set_to_none=True)
    t0 = stopwatch.now()
    loss = workload.loss(model, batch)
    t1 = stopwatch.now()
    loss.backward()
    t2 = stopwatch.now()
    optimizer.step()
    t3 = stopwatch.now()
    return t1 - t0, t2 - t1, t3 - t2


def grad_ready_fractions(
    workload: Workload,
    model: torch.nn.Module,
    layers: list[Layer],
    batch: Batch,
    stopwatch: Stopwatch,
    repeats: int,
) -> tuple[float, ...]:
    """Median over ``repeats`` instrumented backward passes of each layer's ready time / backward time."""
    owner = {id(p): i for i, layer in enumerate(layers) for p in layer.params}
    ready: list[float] = [0.0] * len(layers)
    start = [0.0]

    def on_ready(param: torch.nn.Parameter) -> None:
        index = owner[id(param)]
        ready[index] = max(ready[index], stopwatch.now() - start[0])

    params = [p for layer in layers for p in layer.params]
    handles = [p.register_post_accumulate_grad_hook(on_ready) for p in params]
    samples = []
    try:
        for _ in range(repeats):
            model.zero_grad(set_to_none=True)
            loss = workload.loss(model, batch)
            ready[:] = [0.0] * len(layers)
            start[0] = stopwatch.now()
            loss.backward()
            total = stopwatch.now() - start[0]
            samples.append([min(1.0, r / total) if total > 0 else 1.0 for r in ready])
    finally:
        for handle in handles:
            handle.remove()
        model.zero_grad(set_to_none=True)
    return tuple(statistics.median(column) for column in zip(*samples, strict=True))
