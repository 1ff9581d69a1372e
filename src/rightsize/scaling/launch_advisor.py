"""Where a job starts: one advisor, the same for the service and the simulator.

A job that names its shape (``initial_shape``) starts there, as it is
(:func:`scaling.launch.launch_plan`). Otherwise the advisor asks, in order:

1. **history** — similar finished runs measured shapes (DLRover §4.3: the Brain gives a
   new job its initial plan from similar jobs): the job starts at the fastest of them
   brought within its budget (DLRover's ``fit_into``), if that fits what is free now; it
   waits for that shape while it could ever fit. A policy that plans from such records
   (DLRover, goodput, FA-BF) and picks the same shape keeps its notes, so that it takes
   the shape as its starting point instead of sampling it away.
2. **prediction** — speeds known before launch (``LaunchRequest.prior``: the shapes the
   policy asked to have measured, at their profile-predicted or modelled speed) reach the
   policy's launch plan;
3. **policy** — the policy's launch plan from nothing known.

The fair share at launch is the advisor's rule too (:class:`LaunchShare`): ``free`` lets a
policy's launch take its whole budget, ``fair`` holds it to an even split of the capacity
while other jobs want to run. The service chooses (``rightsize serve --launch-share``); the
simulator launches ``free``, as NEARCHUS's allocator does, and gives no history (its finished
jobs' shapes reach the policies through ``LaunchRequest.prior``), so through the advisor it
starts every job exactly as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

from rightsize.core.errors import RightsizeError, choose
from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape
from rightsize.scaling.api import Action, LaunchRequest, Plan, Policy, ShapeRecord
from rightsize.scaling.dlrover_math import fit_into
from rightsize.scaling.launch import launch_plan

#: The least CPU a fair share offers a launching job: a parameter server and a worker of
#: half a core each, the smallest shape DLRover samples at.
FAIR_SHARE_FLOOR_CORES = 1.0


class LaunchSource(StrEnum):
    """Where a job's launch plan came from (what the service shows and stores)."""

    INITIAL_SHAPE = "job file"  # the shape the job asked for
    HISTORY = "history"
    PREDICTION = "prediction"
    POLICY = "policy"



class LaunchShare(StrEnum):
    """What a job launched by its policy (no ``initial_shape``, no history) may start with.

    ``free``: its whole budget, if that much is free (NEARCHUS §IV's allocator: the first
    of four jobs each budgeted the machine takes all of it, and the rest wait). ``fair``:
    while other jobs run or wait, at most an even split of the capacity among every job that
    wants to run (at least :data:`FAIR_SHARE_FLOOR_CORES`), so that a batch submitted
    together starts side by side; the job's budget is unchanged, and it grows into what
    the others leave once no one waits (docs/service.md).
    """

    FREE = "free"
    FAIR = "fair"



@dataclass(frozen=True)
class PastRun:
    """A shape a similar finished run measured, and at what speed.

    Attributes:
        run: the run's name (the plan's reason names it).
        record: the shape and its measured speed.
        unit: the speed's unit: ``steps/s``, or ``samples/s`` for a script (its batch is
            its own).
    """

    run: str
    record: ShapeRecord
    unit: str = "steps/s"


@dataclass(frozen=True)
class FairShare:
    """The even split of the capacity among the jobs that want it, when a job launches.

    Attributes:
        cores: each job's share (the scheduler's ``fair_share_cores``, floor included).
        wanting: how many jobs want to run (running and waiting).
        capacity_cores: the capacity the share splits, as the plan's reason names it.
    """

    cores: float
    wanting: int
    capacity_cores: float


@dataclass(frozen=True)
class Launch:
    """The advice: the plan to start with (``None``: the job waits) and where it came from."""

    plan: Plan | None
    source: LaunchSource


class LaunchAdvisor:
    """Plans a job's launch: its initial shape, else history, else prediction, else policy.

    Args:
        policy: the job's policy (the simulator's one policy for every job).
        share: the fair share rule for a policy's launch (:class:`LaunchShare`).
    """

    def __init__(self, policy: Policy, share: LaunchShare = LaunchShare.FREE) -> None:
        self.policy, self.share = policy, choose(LaunchShare, share, "launch share")

    def advise(
        self,
        request: LaunchRequest,
        initial_shape: ClusterShape | None = None,
        history: Sequence[PastRun] = (),
        capacity: Resources | None = None,
        fair: FairShare | None = None,
    ) -> Launch:
        """Where the job of ``request`` starts with ``request.free`` to start in.

        Args:
            request: the job, its budget, what is free, and the speeds known before launch
                (``prior``: predicted, profiled or modelled).
            initial_shape: the shape the job asked for, if any: it starts there as it is.
            history: what similar finished runs measured; its records replace ``prior``
                when the policy plans.
            capacity: the most the job could ever be given: a job whose history's shape
                fits there waits for it (``None``: it never waits for history).
            fair: who else wants the capacity (``None``: the job launches as if alone).

        Raises:
            RightsizeError: the policy cannot start the job within its budget.
        """
        if initial_shape is not None:
            return Launch(launch_plan(self.policy, request, initial_shape),
                          LaunchSource.INITIAL_SHAPE)  # fmt: skip
        source = LaunchSource.PREDICTION if request.prior else LaunchSource.POLICY
        if history:
            plan = self._from_history(request, history)
            if plan is not None:
                return Launch(plan, LaunchSource.HISTORY)
            if capacity is not None and fastest_measured(history, request.budget,
                                                         capacity) is not None:  # fmt: skip
                return Launch(None, LaunchSource.HISTORY)  # it waits for that shape to fit
            request = replace(request, prior=tuple(past.record for past in history))
            source = LaunchSource.POLICY
        return Launch(self._policy_launch(request, fair), source)

    def _from_history(self, request: LaunchRequest, history: Sequence[PastRun]) -> Plan | None:
        """The fastest shape measured, as the policy would start there (its own plan's notes
        where it picks the same shape); None if that shape does not fit ``request.free``."""
        fitted = fastest_measured(history, request.budget, request.free)
        if fitted is None:
            return None
        records = tuple(past.record for past in history)
        own = self.policy.launch_plan(replace(request, prior=records))
        if own is None or own.shape != fitted.shape:
            return fitted  # a policy that ignores history: the job starts there anyway
        return Plan(fitted.shape, Action.LAUNCH, fitted.reason, {**own.details, **fitted.details})

    def _policy_launch(self, request: LaunchRequest, fair: FairShare | None) -> Plan | None:
        """The policy's launch plan, within the job's fair share of the capacity while others
        want to run too (``fair`` rule only); with its whole budget where the policy cannot
        start within the share at all (NEARCHUS needs 2 CPU to plan from)."""
        budget = request.budget
        if fair is None or self.share != LaunchShare.FAIR or fair.cores >= budget.cpu_cores:
            return launch_plan(self.policy, request)
        within = replace(request, budget=Resources(fair.cores, budget.memory_bytes, budget.gpus))
        try:
            plan = launch_plan(self.policy, within)
        except RightsizeError:  # it cannot plan within the share: its own budget, as ever
            return launch_plan(self.policy, request)
        return plan and replace(plan, reason=(
            f"{plan.reason}; within a fair share of {fair.cores:g} cpu ({fair.wanting} jobs "
            f"want the service's {fair.capacity_cores:g} cpu)"))  # fmt: skip


def fastest_measured(history: Sequence[PastRun], budget: Resources,
                     free: Resources) -> Plan | None:  # fmt: skip
    """Start at the fastest shape measured, within ``budget``; None if there is none, or it
    does not fit ``free``."""
    if not history:
        return None
    best = max(history, key=lambda past: past.record.steps_per_s)
    shape = fit_into(best.record.shape, budget)
    if not shape.total().fits_within(free):
        return None
    measured = best.record
    fitted = "" if shape == measured.shape else f", fitted into the budget as {shape.describe()}"
    return Plan(shape, Action.LAUNCH,
                f"history: {best.run} ran {measured.shape.describe()} at "
                f"{measured.steps_per_s:.3g} {best.unit}{fitted}",
                {"from_run": best.run, "steps_per_s": measured.steps_per_s})  # fmt: skip
