"""How much device memory a pack needs, from profiles, against the device's capacity (§4.5, §5.2).

A packable partitioning is one whose every group "can fit on a single device"
(§5.2), and §4.5 measures that packing two models needs the sum of their
memory. A trial's footprint comes from a profile of its architecture: its
parameter bytes and the transient bytes a training step needs per sample.
``measure_footprint`` measures the latter as the larger of two figures: the
bytes autograd saves for backward (the slope ``rightsize profile`` records)
and the measured peak of a real forward+backward step (``profiling.memory``'s
meters) less parameters, gradients and input, per sample, at each of
:data:`FOOTPRINT_PEAK_BATCHES`. The saved bytes alone undercount: the
backward pass holds activation gradients and convolution workspaces too, and
a small-CNN step peaked at ~2x its saved bytes. Then::

    trial bytes = params * (2 + optimizer state tensors) + activations/sample * rows
    pack bytes  = shared input batch + sum of its trials' bytes

with 2 for the weights and their gradients; optimizer state tensors are 0
(SGD), 1 (Momentum, Adagrad) or 2 (Adam). A pack is admitted when its bytes
times :data:`MEMORY_HEADROOM` fit the capacity: the stacked layers of a fused
group hold a few transient copies a trial alone does not (transposed outputs
and gradients), which the per-trial footprint cannot see. ``rows`` is the batch a trial is
computed at: in a fused group that pads (§3.1.1) every trial is computed at the
group's largest batch, so the estimate charges that. On a GPU the capacity is
its memory; on a CPU it is a memory budget (``--memory-limit``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from rightsize.core.errors import ResourceError
from rightsize.core.units import format_bytes
from rightsize.packing.optimizers import STATE_TENSORS
from rightsize.packing.trial import ModelOptions, TrialSpec
from rightsize.profiling.memory import (
    PeakMemoryMeter,
    frozen_heap,
    meter_for,
    saved_activation_bytes,
    tensor_bytes,
)
from rightsize.profiling.profile import Profile
from rightsize.workloads.workload import Workload

#: Batch sizes whose saved-activation bytes give the per-sample slope.
FOOTPRINT_BATCHES = (8, 16)
#: Batch sizes whose measured step peaks give the per-sample transient bytes: pack
#: sized, since a pack's layers compute hundreds of rows at once. At 16 and 64 rows
#: a step's tensors fit in freed heap that the resident-set meter cannot see:
#: MLP-3 read 0 bytes per sample there, ~11-12 KB at 256-560 rows, and packs whose
#: estimate used the small batches peaked up to 1.29x over it (issue 6).
FOOTPRINT_PEAK_BATCHES = (256, 512)
#: Measurements of each step peak (the largest is kept: RSS readings can only miss;
#: at the peak batches MLP-3 read 5.7-11.9 KB per sample from one process to the next).
FOOTPRINT_PEAK_REPEATS = 3
#: Margin on a pack's estimate before it is compared with the capacity. Measured
#: step peaks of fused MLP-3 packs were up to 1.21x the estimate (n = 8, batch
#: sizes 20-70, benchmarks/tune/packing_step.py); 1.25 covers that. Set 1.0 for the bare model.
MEMORY_HEADROOM = 1.25


@dataclass(frozen=True)
class Footprint:
    """Memory facts of one architecture."""

    param_bytes: int
    activation_bytes_per_sample: float
    input_bytes_per_sample: float


def measure_footprint(
    workload: Workload,
    device: str | torch.device = "cpu",
    meter: PeakMemoryMeter | None = None,
) -> Footprint:
    """Count a model's parameter bytes and measure the transient bytes of a step per sample.

    Args:
        meter: measures a step's peak (default: the device's own meter).
    """
    device = torch.device(device)
    model = workload.make_model(0, device)
    params = list(model.parameters())
    param_bytes = tensor_bytes(params)
    inputs, target = workload.example_batch(1, device)
    input_bytes = float(sum(t.nbytes for t in (*inputs, target)))
    with frozen_heap():
        saved = saved_activation_slope(workload, model, device)
        peak = _peak_per_sample(
            workload, model, meter or meter_for(device), param_bytes, input_bytes
        )
    return Footprint(param_bytes, max(saved, peak), input_bytes)


def saved_activation_slope(
    workload: Workload, model: torch.nn.Module, device: torch.device
) -> float:
    """Bytes autograd saves for backward per sample (slope over :data:`FOOTPRINT_BATCHES`)."""
    exclude = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved = []
    for size in FOOTPRINT_BATCHES:
        batch = workload.example_batch(size, device)
        keep = exclude | {t.untyped_storage().data_ptr() for t in (*batch[0], batch[1])}
        saved.append(saved_activation_bytes(lambda b=batch: workload.loss(model, b), keep))
    small, large = FOOTPRINT_BATCHES
    return max(0.0, (saved[1] - saved[0]) / (large - small))


def _peak_per_sample(workload, model, meter, param_bytes: int, input_bytes: float) -> float:
    """Largest (step peak - weights - gradients - input) / batch over the peak batches."""
    per_sample = 0.0
    for size in FOOTPRINT_PEAK_BATCHES:
        batch = workload.example_batch(size, next(model.parameters()).device)

        def step(b=batch) -> None:
            model.zero_grad(set_to_none=True)
            workload.loss(model, b).backward()

        step()  # first call: lazy initialisation is not part of a step
        resident = int(param_bytes + input_bytes * size)
        peak = max(meter.measure(step, resident) for _ in range(FOOTPRINT_PEAK_REPEATS))
        per_sample = max(per_sample, (peak - resident - param_bytes) / size)
    model.zero_grad(set_to_none=True)
    return per_sample


def footprint_from_profile(profile: Profile, input_bytes_per_sample: float) -> Footprint:
    """The footprint a saved ``rightsize profile`` measured."""
    return Footprint(
        param_bytes=profile.param_bytes,
        activation_bytes_per_sample=profile.memory.activation_bytes_per_sample,
        input_bytes_per_sample=input_bytes_per_sample,
    )


class PackMemory:
    """Estimates of trial and pack memory, and the capacity they must fit in.

    Args:
        footprint: the footprint of an architecture (model options).
        capacity_bytes: the device's memory (GPU) or the memory budget (CPU).
        pad: whether fused groups compute at their largest batch (``pad`` mode).
        mix_activations: whether trials of different architectures may share a
            fused group (then every trial is charged the pack's largest batch:
            an upper bound, since only activations may differ within a group).
        headroom: margin on a pack's estimate (see :data:`MEMORY_HEADROOM`).
    """

    def __init__(
        self,
        footprint: Callable[[ModelOptions], Footprint],
        capacity_bytes: int,
        pad: bool = True,
        mix_activations: bool = False,
        headroom: float = MEMORY_HEADROOM,
    ) -> None:
        if not headroom >= 1:
            raise ValueError(f"memory headroom must be >= 1, got {headroom}")
        self._footprint, self.capacity_bytes = footprint, capacity_bytes
        self._pad, self._mix, self.headroom = pad, mix_activations, headroom

    def trial_bytes(self, spec: TrialSpec, rows: int | None = None) -> float:
        """One trial computed at ``rows`` samples (default its batch)."""
        footprint = self._footprint(spec.architecture)
        tensors = 2 + STATE_TENSORS[spec.optimizer.kind]
        rows = spec.batch_size if rows is None else rows
        return footprint.param_bytes * tensors + footprint.activation_bytes_per_sample * rows

    def pack_bytes(self, specs: Sequence[TrialSpec]) -> float:
        """A pack of ``specs``: the shared batch plus each trial at the rows it is computed at."""

        def group(spec: TrialSpec):  # the fused group a trial lands in (see pack.PackSettings)
            architecture = None if self._mix else spec.architecture
            return architecture if self._pad else (architecture, spec.batch_size)

        rows: dict = {}
        for spec in specs:
            rows[group(spec)] = max(rows.get(group(spec), 0), spec.batch_size)
        per_sample = max(self._footprint(s.architecture).input_bytes_per_sample for s in specs)
        shared = per_sample * max(s.batch_size for s in specs)
        return shared + sum(self.trial_bytes(s, rows[group(s)]) for s in specs)

    def needed_bytes(self, specs: Sequence[TrialSpec]) -> float:
        """What a pack must find free: its estimate times the headroom."""
        return self.pack_bytes(specs) * self.headroom

    def fits(self, specs: Sequence[TrialSpec]) -> bool:
        return self.needed_bytes(specs) <= self.capacity_bytes

    def check_alone(self, specs: Sequence[TrialSpec]) -> None:
        """Raise if some trial does not fit the device even by itself.

        Raises:
            ResourceError: naming the largest trial, its need and the capacity.
        """
        worst = max(specs, key=lambda s: self.pack_bytes([s]))
        need = self.needed_bytes([worst])
        if need > self.capacity_bytes:
            raise ResourceError(
                f"trial batch_size={worst.batch_size} optimizer={worst.optimizer.kind} needs "
                f"{format_bytes(need)} but the device has {format_bytes(self.capacity_bytes)}; "
                "raise --memory-limit or remove the largest batch sizes from the space"
            )
