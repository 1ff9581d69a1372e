"""Does a restart pay? A plan that restarts the job's ranks is taken only if it gains more
time over the job's remaining work than the restart costs.

Changing a torchrun script's world size stops every rank and starts a new group
that resumes from the script's own checkpoint: seconds of stopping, launching,
rendezvous, reloading and a first step, plus any training since the last save,
which is thrown away and trained again. Ray Train resizes by such restarts every
60 s with no model of whether the move pays; Pollux weighs a re-allocation by its
predicted goodput over the job's remaining time (Qiao et al., OSDI '21, §4.2).
This rule does the same with what the mechanism measured:

- **gain** = ``remaining_s × (1 − v_now / v_then)``: the remaining work, finished at
  the new speed instead of the current one;
- **cost** = ``restart_s + lost_s × v_now / v_then``: the measured restart, and the
  lost training trained again at the new speed;
- taken when ``gain > margin × cost``.

``v_then`` is the speed the new shape was measured at, if the job ran it before;
otherwise DLRover's eq. 1 for synchronous workers without parameter servers: a step
waits for the slowest rank, whose compute runs on ``min(w_i, ŵ)`` cores (``ŵ``: the
cores a rank uses when not held back by its quota, measured when ranks use less than
:attr:`PaybackRule.saturation` of theirs; unknown — so not a limit — when they use it
all), so the job's speed is proportional to ``N × min_i min(w_i, ŵ)``. Eq. 1 has no
term for the allreduce, which makes the prediction for more ranks optimistic; a shape
measured once is predicted by its measurement from then on.

``remaining_s`` comes from the job's length when it is known: a workload's
``steps_total`` (batches summed over workers: its work is its data, which more
workers share), or a script's own optimizer steps (each taken by every rank: its
speed is then per rank-group step, so more ranks pay only where they make each
step faster). Otherwise the job is assumed to run as long again as it has run so
far — the median remaining life of a job whose length is unknown, under a
scale-free prior — so restarts are weighed against more work the longer a job
has lasted; its work is taken to be its data (samples, as with a
``DistributedSampler``).

The rule is pure: the mechanism supplies the measured :class:`RestartCost`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rightsize.core.errors import SpecError
from rightsize.core.shape import ClusterShape
from rightsize.scaling.api import Observation


@dataclass(frozen=True)
class RestartCost:
    """What restarting the ranks costs, as the mechanism measured it.

    Attributes:
        restart_s: stop, relaunch, rendezvous, reload and first step (seconds).
        measured: from a restart of this job (else from its first launch, the best
            estimate before one: the same steps without a stop).
        lost_s: training since the script's last checkpoint that a restart now would throw
            away (0 when the mechanism waits for the script's next save).
        steps_left: a script's optimizer steps left, if the mechanism knows its length (its
            ``steps``). A script of so many steps takes each of them on every rank, so its
            speed is the window's (steps summed over ranks) over the world size: more ranks
            make it faster only by making each rank's step faster.
    """

    restart_s: float
    measured: bool
    lost_s: float = 0.0
    steps_left: float | None = None


@dataclass(frozen=True)
class PaybackRule:
    """Parameters of the rule (ours).

    Attributes:
        margin: the gain must exceed the cost by this factor (1: any net gain).
        saturation: ranks using at least this fraction of their CPU quota are held back by
            it (their unconstrained use ``ŵ`` is unknown).
    """

    margin: float = 1.0
    saturation: float = 0.9

    def __post_init__(self) -> None:
        if self.margin <= 0 or not 0 < self.saturation <= 1:
            raise SpecError(f"payback rule needs margin > 0 and 0 < saturation <= 1: {self}")


@dataclass(frozen=True)
class Payback:
    """The verdict on one plan, with everything it weighed."""

    pays: bool
    gain_s: float
    cost_s: float
    remaining_s: float
    speed_now: float
    speed_then: float
    predicted_by: str  # "measured" or "eq. 1"
    remaining_by: str  # "steps left", "steps_total" or "as long again"

    def describe(self) -> str:
        verdict = "pays back" if self.pays else "does not pay back"
        return (f"{verdict}: predicted gain {self.gain_s:.1f}s ({self.speed_now:.3g} -> "
                f"{self.speed_then:.3g} steps/s by {self.predicted_by}, over ~"
                f"{self.remaining_s:.0f}s left by {self.remaining_by}) against a restart cost "
                f"of {self.cost_s:.1f}s")  # fmt: skip


def unconstrained_cores(obs: Observation, saturation: float) -> float:
    """``ŵ``: a rank's mean CPU use over the window, if ranks were not held back by their
    quota; ``inf`` when they were (or nothing was measured)."""
    ranks = {w.name for w in obs.shape.workers}
    readings = [n for sample in obs.window for n in sample.nodes if n.name in ranks]
    used = sum(n.cpu_used_cores for n in readings)
    allocated = sum(n.cpu_allocated_cores for n in readings)
    if not allocated or used >= saturation * allocated:
        return math.inf
    return used / len(readings)


def capacity(shape: ClusterShape, w_hat: float) -> float:
    """Eq. 1 for synchronous ranks, up to a constant: ``N × min_i min(w_i, ŵ)``."""
    if not shape.workers:
        return 0.0
    return shape.n_workers * min(min(n.resources.cpu_cores, w_hat) for n in shape.workers)


def predicted_speed(obs: Observation, shape: ClusterShape, rule: PaybackRule) -> tuple[float, str]:
    """The job's steps/s with ``shape``: measured before, or scaled from now by eq. 1."""
    for record in reversed(obs.history):
        if record.shape == shape and record.steps_per_s > 0:
            return record.steps_per_s, "measured"
    now = obs.mean_speed()
    w_hat = unconstrained_cores(obs, rule.saturation)
    here = capacity(obs.shape, w_hat)
    return (now * capacity(shape, w_hat) / here if here else 0.0), "eq. 1"


def remaining_s(obs: Observation, speed: float) -> tuple[float, str]:
    """Seconds the job has left at ``speed``: from its length if known (``steps_total``, in
    the window's unit), else as long again."""
    if speed > 0 and obs.steps_total is not None:
        return max(0.0, obs.steps_total - obs.steps_done) / speed, "steps_total"
    return max(0.0, obs.time_s), "as long again"


def payback(obs: Observation, shape: ClusterShape, cost: RestartCost,
            rule: PaybackRule = PaybackRule()) -> Payback:  # fmt: skip
    """Whether restarting the ranks into ``shape`` pays for itself (see the module's doc)."""
    now = obs.mean_speed()
    then, predicted_by = predicted_speed(obs, shape, rule)
    if cost.steps_left is not None:  # a script's own steps: each is every rank's
        now, then = now / obs.shape.n_workers, then / max(1, shape.n_workers)
        left, remaining_by = (cost.steps_left / now if now > 0 else 0.0), "steps left"
    else:
        left, remaining_by = remaining_s(obs, now)
    if now <= 0 or then <= 0:
        return Payback(False, 0.0, cost.restart_s, left, now, then, predicted_by, remaining_by)
    ratio = now / then
    gain = left * (1 - ratio)
    spent = cost.restart_s + cost.lost_s * ratio
    return Payback(gain > rule.margin * spent, gain, spent, left, now, then, predicted_by,
                   remaining_by)  # fmt: skip
