"""Plans for a user's own script from what its runs measured, on the instance types they ran on.

A script has no profile (rightsize never builds its model), so the profile-based planner
cannot predict it; what it does have is its stored runs (``rightsize torchrun
--instance-type TYPE`` on a host of that type, or the service's): each run's fastest
shape at its median samples/s (service/history.py). FC2's recommender reads such
"empirical performance data obtained from past executions" (§4). For every instance
type the runs measured, one VM of it takes the job's samples at the measured speed —
scaled to the whole VM when the run held fewer of a CPU VM's cores (as
``planning/measured.py`` does for a profiled workload) — at the type's hourly price.
Types no run measured are not predicted: that needs a profile. More VMs than measured
are not predicted either: the exchange between them was not measured.
"""

from __future__ import annotations

from dataclasses import dataclass

from rightsize.core.errors import SpecError
from rightsize.core.spec import Constraints, Objective
from rightsize.planning.measured import MeasuredSpeed


@dataclass(frozen=True)
class MeasuredPlan:
    """One VM of ``instance_type`` running the script's job at the speed its runs measured."""

    instance_type: str
    vms: int
    samples_per_s: float
    time_s: float
    cost_usd: float
    price_usd_per_hour: float
    measured_by: tuple[str, ...]
    scaled_from_cores: float | None  # the run held fewer cores than the VM has

    def to_dict(self) -> dict:
        return {**self.__dict__, "measured_by": list(self.measured_by)}


def measured_plans(speeds: list[MeasuredSpeed], instance_of, samples: float,
                   constraints: Constraints, objective: Objective,
                   spot: bool = False) -> list[MeasuredPlan]:  # fmt: skip
    """The plans ``speeds`` support for ``samples`` samples, best first by ``objective``,
    within ``constraints``. ``instance_of(name)`` gives a type's catalog row.

    Raises:
        SpecError: no run of the script measured a type with a price here.
    """
    plans = []
    for name in sorted({s.instance_type for s in speeds}):
        instance = instance_of(name)
        if spot and instance.spot_price_usd_per_hour is None:
            continue
        price = instance.price(spot)
        mine = [s for s in speeds if s.instance_type == name]
        best = max(mine, key=lambda s: s.samples_per_s * _whole_vm(s, instance))
        speed = best.samples_per_s * _whole_vm(best, instance)
        time_s = samples / speed
        scaled = best.cores if _whole_vm(best, instance) != 1.0 else None
        plans.append(MeasuredPlan(name, 1, speed, time_s, time_s / 3600 * price, price,
                                  tuple(s.run for s in mine), scaled))  # fmt: skip
    if not plans:
        raise SpecError("no run of this script measured an instance type with a price in this "
                        "catalog: run it with --instance-type TYPE on a host of that type")  # fmt: skip
    fits = [p for p in plans if _meets(p, constraints)]
    key = (lambda p: (p.cost_usd, p.time_s)) if objective == Objective.COST else (
        lambda p: (p.time_s, p.cost_usd))  # fmt: skip
    return sorted(fits, key=key)


def _whole_vm(speed: MeasuredSpeed, instance) -> float:
    """How much faster a whole CPU VM is than the cores the run held (1 for GPUs)."""
    if instance.accelerator or not 0 < speed.cores < instance.vcpus:
        return 1.0
    return instance.vcpus / speed.cores


def _meets(plan: MeasuredPlan, constraints: Constraints) -> bool:
    deadline, budget = constraints.deadline_s, constraints.budget_usd
    return (deadline is None or plan.time_s <= deadline) and (
        budget is None or plan.cost_usd <= budget)  # fmt: skip
