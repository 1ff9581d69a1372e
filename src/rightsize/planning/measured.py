"""Past runs' measured speed in place of a prediction, for the instance types they ran on.

FC2's recommender reads "a database which stores empirical performance data obtained
from past executions" (§4). A run stored with its host's instance type (``rightsize
run --instance-type``, service/store.py) measured what one VM of that type does for
its workload at one batch. :func:`with_history` puts the runs of a type in place of
its prediction, one of two ways (``HistoryFit``):

- ``scale``: the type's compute model times one factor, the median over the runs of
  measured over predicted step time. The model's shape over batches stays the
  profile's; only its level comes from the runs.
- ``interpolate`` (default): between the batches runs measured, the measured
  throughput itself, interpolated in log batch; above the largest, that batch's
  throughput (a saturated device, Srift's insight 1); below the smallest, the
  profile's shape anchored at it. With one measured batch it is ``scale``.

Measured (benchmarks/plan/plan_history.py): on this host the profile's curve over batches
is wrong in shape, not only in level (it has throughput falling with the batch where
real runs hold it flat), so scaling it leaves most of the error; interpolating what
was measured removes it. The spread of the runs' factors becomes the option's
interval either way.

A run on a CPU instance may have held fewer cores than the VM has (a budget of 2
on an 8-vCPU VM): its speed is scaled to the whole VM in proportion to the cores,
as the roofline scales CPUs (``DeviceRates.of_cpu_instance``), and the option says
so. The measured step includes what the run's nodes exchanged on the one host,
which the planner counts as hidden inside a VM.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from enum import StrEnum

import numpy as np

from rightsize.perf.compute import ComputeTime
from rightsize.planning.options import InstanceOption


class HistoryFit(StrEnum):
    """How measured runs replace a type's predicted compute (the module docstring)."""

    INTERPOLATE = "interpolate"
    SCALE = "scale"


@dataclass(frozen=True)
class MeasuredSpeed:
    """What one finished run measured on one VM.

    Attributes:
        run: the run's name in the store.
        instance_type: the host's declared instance type.
        vm_batch: samples per step over all the run's workers.
        samples_per_s: the median speed of its fastest shape.
        cores: the CPU cores that shape held.
    """

    run: str
    instance_type: str
    vm_batch: int
    samples_per_s: float
    cores: float

    def held_fewer_cores(self, option: InstanceOption) -> bool:
        """Whether the run held fewer cores than a CPU VM of ``option`` has."""
        return not option.instance.accelerator and 0 < self.cores < option.instance.vcpus

    def vm_step_s(self, option: InstanceOption) -> float:
        """The step time of one whole VM of ``option`` at :attr:`vm_batch`."""
        speed = self.samples_per_s
        if self.held_fewer_cores(option):
            speed *= option.instance.vcpus / self.cores
        return self.vm_batch / speed


@dataclass(frozen=True)
class CorrectedCompute:
    """A compute model whose times are scaled by ``factor`` (measured over predicted)."""

    base: object  # ComputeModel | RooflineCompute | GpuCompute: anything with predict()
    factor: float

    def predict(self, batch: float) -> ComputeTime:
        t = self.base.predict(batch)
        f = self.factor
        return ComputeTime(t.forward_s * f, t.backward_s * f, t.total_s * f)

    @property
    def optimizer_s(self) -> float:
        return self.base.optimizer_s * self.factor


@dataclass(frozen=True)
class InterpolatedCompute:
    """Measured throughput between the measured batches (per device), flat above them, the
    base model's shape anchored at the smallest below them; forward and backward split as
    the base model splits them."""

    base: object
    batches: tuple[float, ...]  # ascending, per device
    throughputs: tuple[float, ...]  # samples/s of one device at those batches

    def predict(self, batch: float) -> ComputeTime:
        t = self.base.predict(batch)
        low = self.batches[0]
        if batch < low:  # the profile's shape below the smallest measured batch
            factor = (low / self.throughputs[0]) / self.base.predict(low).total_s
        else:
            speed = float(np.interp(math.log(batch), np.log(self.batches), self.throughputs))
            factor = (batch / speed) / t.total_s
        return ComputeTime(t.forward_s * factor, t.backward_s * factor, t.total_s * factor)

    @property
    def optimizer_s(self) -> float:
        return self.base.optimizer_s


def with_history(option: InstanceOption, speeds: list[MeasuredSpeed],
                 fit: HistoryFit = HistoryFit.INTERPOLATE) -> InstanceOption:  # fmt: skip
    """``option`` with its compute taken from what the runs on its type measured (itself when
    none ran on it)."""
    mine = [s for s in speeds if s.instance_type == option.name]
    if not mine:
        return option
    factors = [s.vm_step_s(option) / option.vm_compute(s.vm_batch).total_s for s in mine]
    factor = statistics.median(factors)
    spread = max(abs(math.log(f / factor)) for f in factors)
    compute: object = CorrectedCompute(option.compute, factor)
    by_batch: dict[float, list[float]] = {}
    for s in mine:  # per-device batch -> one device's measured samples/s
        per_device = s.vm_batch / option.devices
        by_batch.setdefault(per_device, []).append(per_device / s.vm_step_s(option))
    if fit is HistoryFit.INTERPOLATE and len(by_batch) > 1:
        batches = tuple(sorted(by_batch))
        compute = InterpolatedCompute(option.compute, batches,
                                      tuple(statistics.median(by_batch[b]) for b in batches))  # fmt: skip
    scaled = [s.run for s in mine if s.held_fewer_cores(option)]
    note = f", scaled from fewer cores: {', '.join(scaled)}" if scaled else ""
    how = (f"interpolated over {len(by_batch)} batches"
           if isinstance(compute, InterpolatedCompute) else f"x{factor:.3g}")  # fmt: skip
    provenance = (f"{option.provenance} {how}: measured by "
                  f"{', '.join(s.run for s in mine)}{note}")  # fmt: skip
    return replace(option, compute=compute, provenance=provenance, log_spread=spread,
                   predictions={})  # fmt: skip
