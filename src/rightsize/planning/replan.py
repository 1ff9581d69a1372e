"""Re-planning after a spot instance is lost (Srift §4.5).

When a spot VM is preempted, Srift checkpoints, and re-runs the optimizer on
what is left: the remaining iterations ``N - n``, the remaining time
``T_lim - t`` and money ``$_lim - c``. It takes the preemption as a sign that the
cloud has no more of that type, so it never asks for it again — though the VMs
of that type still running may stay. A configuration that needs new VMs pays
the launch time (150 s on EC2 in Srift's experiment); every configuration pays
the wait for the lost VM's volume to detach (5 s). If nothing fits, the error
says what the closest plan misses by, for the user to abort or relax.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from rightsize.core.errors import ResourceError
from rightsize.core.spec import Constraints
from rightsize.perf.comm import CommModel
from rightsize.planning.estimate import Estimator, PlanRequest
from rightsize.planning.options import InstanceOption
from rightsize.planning.plan import CloudPlan
from rightsize.planning.search import SearchSettings, search

LAUNCH_S = 150.0  # Srift §5.4: expected EC2 instance launch time
DETACH_S = 5.0  # Srift §5.4: EBS volume detach after a termination


@dataclass(frozen=True)
class Progress:
    """Where training stands when the interruption happens."""

    iterations_done: int
    elapsed_s: float
    spent_usd: float


@dataclass(frozen=True)
class Interruption:
    """What was lost and what is still running.

    Attributes:
        lost: instance types that were preempted (never requested again).
        running: VMs still up, by instance type (they need no launch).
    """

    lost: frozenset[str]
    running: dict[str, int] = field(default_factory=dict)
    launch_s: float = LAUNCH_S
    detach_s: float = DETACH_S


def remaining_request(
    original: PlanRequest, progress: Progress, interruption: Interruption
) -> PlanRequest:
    """The original request with Srift's updated constraints ``N - n``, ``T - t``, ``$ - c``.

    Raises:
        ResourceError: the job is already done, or the deadline or budget is already spent.
    """
    left = original.iterations - progress.iterations_done
    if left <= 0:
        raise ResourceError("nothing to re-plan: all iterations are done")
    limits = original.constraints
    deadline = None if limits.deadline_s is None else limits.deadline_s - progress.elapsed_s
    budget = None if limits.budget_usd is None else limits.budget_usd - progress.spent_usd
    if (deadline is not None and deadline <= 0) or (budget is not None and budget <= 0):
        raise ResourceError("the deadline or the budget is already used up; relax it to re-plan")
    return replace(
        original,
        iterations=left,
        constraints=Constraints(deadline_s=deadline, budget_usd=budget),
        launch_s=interruption.launch_s,
        restart_s=interruption.detach_s,
        warm=tuple(sorted(interruption.running.items())),
    )


def remaining_options(
    options: Sequence[InstanceOption], interruption: Interruption
) -> list[InstanceOption]:
    """Lost types keep only their running VMs; every other type keeps its availability."""
    kept = []
    for option in options:
        if option.name in interruption.lost:
            running = interruption.running.get(option.name, 0)
            if running:
                kept.append(replace(option, cap=running))
        else:
            kept.append(option)
    return kept


def replan(options: Sequence[InstanceOption], comm: CommModel, original: PlanRequest,
           progress: Progress, interruption: Interruption,
           settings: SearchSettings | None = None) -> list[CloudPlan]:  # fmt: skip
    """Srift's re-planning: search again on what is left.

    Raises:
        InfeasiblePlanError: nothing meets the remaining constraints (with the closest plan).
    """
    request = remaining_request(original, progress, interruption)
    usable = remaining_options(options, interruption)
    estimator = Estimator({o.name: o for o in usable}, comm, request)
    return search(usable, estimator, settings or SearchSettings())
