"""Instance types as the planner sees them: compute per VM, memory-bound batches, price, availability.

For each candidate instance type the planner needs the step time of one VM at a
per-VM batch. A VM with k accelerators splits its batch k ways (data parallel
inside the VM; the intra-VM reduction over NVLink/PCIe is taken as hidden by the
inter-VM one). The compute model comes from a measured profile of the workload
on that accelerator when the user gave one (``measured``), else, on a GPU, from
the calibrated device model at the requested precision (``device model``,
perf/device_model.py), else from the best profile scaled by the roofline
(``roofline``; the default for CPU instances, and selectable for GPUs as Srift's
ratio method) — the option says which. Per-VM batches are powers of two from a saturating batch up to the
largest that fits the device's memory (Srift §4.4 insight 1), and — beyond Srift,
so that a global batch such as 360 can be planned at all — the global batch's
equal shares over this type's VMs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from rightsize.core.catalog import InstanceType
from rightsize.core.errors import SpecError
from rightsize.perf.comm import Link
from rightsize.perf.compute import ComputeModel, ComputeTime
from rightsize.perf.device_model import DeviceModel, GpuCompute
from rightsize.perf.iteration import LayerGrad, gradient_bytes
from rightsize.perf.precision import Precision
from rightsize.perf.roofline import DeviceRates, RooflineCompute
from rightsize.profiling.profile import Profile

SATURATION = 0.5  # a batch saturates the device when it reaches half the best throughput
MEMORY_USABLE = 0.9  # of an accelerator's memory, after CUDA context and fragmentation


class ComputeMethod(StrEnum):
    """How a GPU nobody profiled is predicted."""

    CALIBRATED = "calibrated"  # the device model: counted costs, datasheet, fitted efficiencies
    CALIBRATED_PER_OP = "calibrated-per-op"  # the same, each dispatched operation by its shape
    RATIO = "ratio"  # the profile's measured time scaled by a roofline ratio (perf/roofline.py)
    ABSOLUTE = "absolute"  # the roofline at a fixed efficiency


#: The calibrated methods and the device model each runs.
CALIBRATED = {ComputeMethod.CALIBRATED: DeviceModel.PER_CLASS,
              ComputeMethod.CALIBRATED_PER_OP: DeviceModel.PER_OP}  # fmt: skip


@dataclass(frozen=True)
class DeviceChoice:
    """What the user asked about devices: the model for unprofiled GPUs and the precision."""

    method: ComputeMethod = ComputeMethod.CALIBRATED_PER_OP
    precision: Precision = Precision.PYTORCH


DEFAULT_DEVICE = DeviceChoice()


@dataclass(frozen=True)
class InstanceOption:
    """One instance type, ready to be counted and given a batch.

    Attributes:
        instance: the catalog row.
        compute: per-device compute model (measured, device model or roofline-scaled).
        devices: accelerators per VM (1 for CPU-only VMs).
        bmax_per_device: the largest per-device batch that fits in memory.
        cv: spread of the compute time (std/mean), Srift's straggler scale.
        provenance: ``measured (<device>)`` or ``roofline from <device>``.
        price_per_hour: on-demand or spot, as the request asked.
        cap: how many VMs of this type may be used (CAPS[i]).
        layers: the gradients to exchange, with their ready times.
        mem_bytes_per_s: one device's memory bandwidth (DDP's bucket copies).
        log_spread: the compute model's interval half-width in log space (0 when measured on
            the device, the calibration's held-out spread for the device model, None for a
            roofline scaling, whose error is not known per prediction).
        predictions: ``compute``'s predictions so far, by per-device batch. The search asks
            for the same few batches again and again (the device model takes about a
            millisecond each), and the types of one accelerator share them (make_option).
    """

    instance: InstanceType
    compute: ComputeModel | RooflineCompute | GpuCompute
    devices: int
    bmax_per_device: int
    cv: float
    provenance: str
    price_per_hour: float
    cap: int
    layers: tuple[LayerGrad, ...]
    mem_bytes_per_s: float
    log_spread: float | None = 0.0
    predictions: dict[float, ComputeTime] = field(default_factory=dict, compare=False, repr=False)

    @property
    def name(self) -> str:
        return self.instance.name

    @property
    def bmax(self) -> int:
        return self.devices * self.bmax_per_device

    @property
    def link(self) -> Link:
        i = self.instance
        return Link(i.name, i.network_gbps, i.vcpus, i.memory_gib, i.accelerator_name or "")

    def vm_compute(self, vm_batch: int) -> ComputeTime:
        """Forward and backward time of one VM whose devices share ``vm_batch``."""
        return self.device_compute(vm_batch / self.devices)

    def device_compute(self, batch: float) -> ComputeTime:
        """Forward and backward time of one device at ``batch``."""
        if batch not in self.predictions:
            self.predictions[batch] = self.compute.predict(batch)
        return self.predictions[batch]

    @functools.cached_property
    def gradient_bytes(self) -> int:
        """Bytes of every gradient to exchange."""
        return gradient_bytes(self.layers)

    @functools.cached_property
    def optimizer_s(self) -> float:
        # cached: the device model works it out from a whole step
        return self.compute.optimizer_s

    @functools.cached_property
    def saturating_vm_batch(self) -> int:
        # cached: the search asks for an option's batches once per configuration subset
        return saturating_batch(self.device_compute, self.bmax_per_device) * self.devices

    def batches(self, minimum: int = 1, global_batch: int | None = None) -> list[int]:
        """Per-VM batches worth trying: powers of two from the saturating batch up to B_max
        (Srift's insight 1); with ``global_batch``, also its equal shares over 1..cap VMs
        that are not powers of two, fit B_max and split evenly over the VM's devices — the
        only way to plan a global batch of 360 or 172. A power-of-two global batch has no
        such shares, so its search is Srift's."""
        low = max(minimum, self.saturating_vm_batch)
        powers = [2**k for k in range(self.bmax.bit_length()) if low <= 2**k <= self.bmax]
        if global_batch is None:
            return powers
        shares = {global_batch // n for n in range(1, self.cap + 1) if global_batch % n == 0}
        extra = {b for b in shares
                 if b & (b - 1) and minimum <= b <= self.bmax and b % self.devices == 0}  # fmt: skip
        return sorted(set(powers) | extra)


def saturating_batch(predict: Callable[[float], ComputeTime], bmax: int,
                     saturation: float = SATURATION) -> int:  # fmt: skip
    """Smallest power of two whose throughput reaches ``saturation`` of the best up to B_max."""
    candidates = [2**k for k in range(bmax.bit_length()) if 2**k <= bmax] or [bmax]
    speed = {b: b / predict(b).total_s for b in candidates}
    best = max(speed.values())
    return next(b for b in candidates if speed[b] >= saturation * best)


def bmax_on(profile: Profile, memory_bytes: int, usable: float = MEMORY_USABLE,
            activation_factor: float = 1.0) -> int:  # fmt: skip
    """Largest batch whose predicted peak fits ``usable`` of ``memory_bytes``.

    The peak is the line through the profile's measured (batch, peak memory)
    probes: resident bytes plus a per-sample slope, the slope scaled by
    ``activation_factor`` (0.5 when autocast stores activations in 16 bits).
    """
    probes = np.array(profile.memory.probes, dtype=float)
    if len(probes) < 2 or np.ptp(probes[:, 0]) == 0:
        slope = profile.memory.activation_bytes_per_sample
        base = float(profile.memory.resident_bytes)
    else:
        slope, base = np.polyfit(probes[:, 0], probes[:, 1], 1)
    slope *= activation_factor
    return max(0, int((usable * memory_bytes - base) // max(slope, 1.0)))


def grads_of(profile: Profile, batch: int) -> tuple[LayerGrad, ...]:
    ready = profile.sample_nearest(batch).grad_ready
    return tuple(
        LayerGrad(layer.param_bytes, f) for layer, f in zip(profile.layers, ready, strict=True)
    )


def _measured_for(profiles: Sequence[Profile], instance: InstanceType) -> Profile | None:
    acc = instance.accelerator_name
    for profile in profiles:
        on_gpu = profile.device.kind == "cuda"
        if acc and on_gpu and acc.lower() in profile.device.name.lower():
            return profile
        if not acc and not on_gpu and instance.name in profile.device.name:
            return profile
    return None


def make_option(
    profiles: Sequence[Profile],
    instance: InstanceType,
    cap: int,
    spot: bool = False,
    device: DeviceChoice = DEFAULT_DEVICE,
    shared: dict[tuple[str, str], dict[float, ComputeTime]] | None = None,
) -> InstanceOption:
    """Resolve how one instance type computes, and what it may hold.

    ``shared`` holds the predictions of the options made so far, by provenance and
    accelerator: types with the same accelerator, predicted the same way, share them.

    Raises:
        SpecError: no profile given, or the workload does not fit the device even at batch 1.
    """
    if not profiles:
        raise SpecError("planning needs at least one profile of the workload (rightsize profile)")
    measured = _measured_for(profiles, instance)
    devices = max(1, instance.accelerator_count)
    target = (
        DeviceRates.of_accelerator(instance.accelerator)
        if instance.accelerator
        else DeviceRates.of_cpu_instance(instance)
    )
    if measured is not None:
        compute = ComputeModel.from_profile(measured)
        profile, provenance, bmax = measured, f"measured ({measured.device.name})", measured.bmax
        spread = 0.0
    elif instance.accelerator and device.method in CALIBRATED:
        profile = next((p for p in profiles if p.device.kind == "cuda"), profiles[0])
        compute = GpuCompute.of(profile, instance.accelerator, device.precision,
                                method=CALIBRATED[device.method])  # fmt: skip
        per_op = " per-op" if compute.method is DeviceModel.PER_OP else ""
        provenance = f"device model{per_op} ({device.precision.value})"
        spread = compute.log_spread
        bmax = bmax_on(profile, target.memory_bytes,
                       activation_factor=device.precision.activation_bytes_factor)  # fmt: skip
    else:
        profile = next((p for p in profiles if p.device.kind == "cuda"), profiles[0])
        method = (ComputeMethod.RATIO if device.method in CALIBRATED
                  else device.method)  # CPU instances: the calibration is of GPUs  # fmt: skip
        compute = RooflineCompute(
            profile,
            ComputeModel.from_profile(profile),
            DeviceRates.of_profile(profile),
            target,
            method.value,
        )
        provenance = f"roofline from {profile.device.kind} ({method.value})"
        spread = None
        bmax = bmax_on(profile, target.memory_bytes)
    if bmax < 1:
        raise SpecError(f"{profile.workload} does not fit one {instance.describe_accelerators()} "
                        f"of {instance.name} even at batch 1")  # fmt: skip
    predictions = ({} if shared is None else
                   shared.setdefault((provenance, instance.accelerator_name or instance.name), {}))  # fmt: skip
    return InstanceOption(
        instance=instance, compute=compute, devices=devices, bmax_per_device=bmax,
        cv=profile.compute_cv, provenance=provenance, price_per_hour=instance.price(spot),
        cap=cap, layers=grads_of(profile, bmax), mem_bytes_per_s=target.mem_bytes_per_s,
        log_spread=spread, predictions=predictions,
    )  # fmt: skip
