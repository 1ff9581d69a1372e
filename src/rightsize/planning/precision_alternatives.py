"""The plan at the other precisions a user could train in, when it would change the answer.

A user who trains at PyTorch's pip default on an Ampere GPU could switch TF32 matmuls on
with one line, or train in mixed precision, and the right cluster may then be another
one, not the same one a few times faster. So the alternatives are planned, not rescaled:
the same search over the same market, request and past runs, at TF32 and at AMP, and
shown beside the chosen plan when the time or the cost differs from it by more than
:data:`SHOWN_ABOVE`. Only GPUs the device model predicts depend on the precision;
without one, there is nothing to plan again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rightsize.perf.comm import CommModel
from rightsize.perf.device_model import GpuCompute
from rightsize.perf.precision import Precision
from rightsize.planning.estimate import PlanRequest
from rightsize.planning.measured import HistoryFit, MeasuredSpeed
from rightsize.planning.options import InstanceOption
from rightsize.planning.plan import CloudPlan
from rightsize.planning.recommend import Market, srift
from rightsize.planning.search import InfeasiblePlanError

#: An alternative is shown when its total time or total cost differs from the chosen plan's
#: by more than this fraction of the chosen plan's (below it, precision is not the question).
SHOWN_ABOVE = 0.20
#: The precisions a user can switch to with a line of code or a container: TF32 matmuls, AMP.
ALTERNATIVES = (Precision.TF32, Precision.AMP)


@dataclass(frozen=True)
class PrecisionAlternative:
    """The best plan at ``precision``, and how it compares with the chosen plan."""

    precision: Precision
    plan: CloudPlan
    time_change: float  # its total time over the chosen plan's, minus 1
    cost_change: float

    def to_dict(self) -> dict[str, Any]:
        return {"precision": self.precision.value, "plan": self.plan.to_dict(),
                "total_seconds_change": self.time_change,
                "total_cost_change": self.cost_change}  # fmt: skip


def device_modelled(options: Sequence[InstanceOption]) -> list[InstanceOption]:
    """The options whose compute the device model predicts (the ones precision changes)."""
    return [o for o in options if isinstance(o.compute, GpuCompute)]


def compared(precision: Precision, plan: CloudPlan, chosen: CloudPlan) -> PrecisionAlternative:
    return PrecisionAlternative(precision, plan, plan.total_seconds / chosen.total_seconds - 1,
                                plan.total_cost / chosen.total_cost - 1)  # fmt: skip


def worth_showing(alternative: PrecisionAlternative, above: float = SHOWN_ABOVE) -> bool:
    return abs(alternative.time_change) > above or abs(alternative.cost_change) > above


def precision_alternatives(
    profiles: Sequence,
    market: Market,
    request: PlanRequest,
    comm: CommModel,
    chosen: CloudPlan,
    options: Sequence[InstanceOption],
    mode: str = "auto",
    top: int = 5,
    speeds: Sequence[MeasuredSpeed] = (),
    fit: HistoryFit = HistoryFit.INTERPOLATE,
) -> list[PrecisionAlternative]:
    """The best plan at each of :data:`ALTERNATIVES` other than ``market``'s precision, by
    the search that chose ``chosen`` from ``options``, where it differs from ``chosen`` by
    more than :data:`SHOWN_ABOVE`. A precision at which no plan meets the request has no
    alternative to show."""
    if not device_modelled(options):
        return []
    shown = []
    for precision in ALTERNATIVES:
        if precision is market.device.precision:
            continue
        other = dataclasses.replace(
            market, device=dataclasses.replace(market.device, precision=precision))
        try:
            found = srift(profiles, other, request, comm, mode, top, speeds, fit)
        except InfeasiblePlanError:
            continue
        alternative = compared(precision, found.result.plans[0], chosen)
        if worth_showing(alternative):
            shown.append(alternative)
    return shown
