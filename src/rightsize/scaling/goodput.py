"""Goodput: right-size a group of synchronous ranks, in place first, by restart only if it pays.

Ours, for ``rightsize torchrun`` jobs (allreduce ranks, no parameter servers). A change
of CPU quota is free (the ranks keep running); a change of world size restarts every
rank from the script's own checkpoint (``runtime/script_group.py``), which the mechanism
weighs against its measured cost (``scaling/payback.py``) before it is carried out. So
the rules, tried in order on the window since the last move:

1. **back to the fastest**: if a shape measured before was faster than this one by more
   than ``min_gain``, return to it (NEARCHUS+'s revert, on speeds read the same way for
   every shape: the median of the samples after ``settle_samples``);
2. **keep what helped**: a growth in place that gained less than ``min_gain`` is given
   back (the CPU was not what held the ranks back);
3. **grow in place**: ranks using at least ``saturation`` of their quota get as much as
   the budget and the node limit allow (``growth``: at most that factor more), in one move:
   DLRover's sampling stage runs a worker on ``C_max`` for the same reason — a rank held
   back by its quota hides what it needs — and rule 2 gives back what did not help. This
   rule alone is tried from ``grow_after_samples`` settled samples on, before the others
   have their ``judge_samples``: a quota change costs no restart, and every second at a
   quarter of the speed it wants costs the job three quarters of a second;
4. **as many ranks as the CPU keeps busy**: ranks using less than ``saturation`` of their
   quota reveal ``ŵ``, and DLRover's eq. 10 without servers, ``N_w = C_total / ⌈ŵ⌉``, gives
   the world size whose ranks use what they get — proposed if it differs, was not
   measured before, and is within the allowed range.

Each plan's ``details`` carry the speed of the shape it leaves (``from_speed``) and the
move (``move``), which is how the policy remembers what it measured (policies keep
their memory in plans, ``scaling/api.py``).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from rightsize.core.errors import SpecError
from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape
from rightsize.core.spec import Strategy
from rightsize.scaling.api import Action, LaunchRequest, Observation, Plan, Policy
from rightsize.scaling.params import with_overrides
from rightsize.scaling.shapes import grows_within

GROW, GIVE_BACK, RESHAPE, REVERT = "grow", "give_back", "reshape", "revert"


@dataclass(frozen=True)
class GoodputParams:
    """The rules' parameters (ours).

    Attributes:
        saturation: ranks using this share of their CPU quota are held back by it (0.9, as
            DLRover's PS threshold).
        growth: a saturated rank's CPU grows by at most this factor (none: to what the
            budget and node limit allow, DLRover's ``C_max`` sampling; 2 is DLRover's PS
            growth, measured beside it in benchmarks/torchrun/torchrun_rightsizing.py).
        min_gain: a move must make the job this much faster to be kept (0.05, NEARCHUS's
            stability bound).
        settle_samples: samples after a move left out (the ranks start, load, warm up; the
            median of the judged samples absorbs one more that is still warming).
        judge_samples: settled samples the rules wait for before they judge a shape (its
            speed: the median of all its settled samples).
        grow_after_samples: settled samples after which a saturated rank grows in place
            (rule 3), before the other rules judge (1: at once, as DLRover's sampling stage
            does; ``judge_samples`` waits for them, the first version, measured beside it
            in benchmarks/torchrun/torchrun_rightsizing.py).
        core_step: CPU is planned in whole multiples of this many cores.
    """

    saturation: float = 0.9
    growth: float | None = None
    min_gain: float = 0.05
    settle_samples: int = 1
    judge_samples: int = 3
    grow_after_samples: int = 1
    core_step: float = 0.1

    def __post_init__(self) -> None:
        growth_ok = self.growth is None or self.growth > 1
        if not 0 < self.saturation <= 1 or not growth_ok or not 0 <= self.min_gain < 1:
            raise SpecError("goodput needs 0 < saturation <= 1, growth > 1 (or none), "
                            "0 <= min_gain < 1")  # fmt: skip
        if (self.settle_samples < 0 or self.judge_samples < 1 or self.core_step <= 0
                or not 1 <= self.grow_after_samples <= self.judge_samples):
            raise SpecError("goodput needs settle_samples >= 0, judge_samples >= 1, "
                            "1 <= grow_after_samples <= judge_samples, core_step > 0")  # fmt: skip


@dataclass(frozen=True)
class Measured:
    shape: ClusterShape
    speed: float


class GoodputPolicy(Policy):
    """The rules above. Parameters: :class:`GoodputParams`."""

    name = "goodput"
    strategies = frozenset({Strategy.ALLREDUCE})

    def __init__(self, params: GoodputParams | None = None, **overrides: Any) -> None:
        self.params = with_overrides(GoodputParams, params, overrides)

    def initial_shape(self, budget: Resources, free: Resources) -> ClusterShape | None:
        """One rank with half the budget: small enough to grow into anything."""
        node = Resources(max(self.params.core_step, budget.cpu_cores / 2), budget.memory_bytes // 2)
        shape = ClusterShape.from_counts(0, 1, node, node)
        return shape if shape.total().fits_within(free) else None

    def launch_plan(self, request: LaunchRequest) -> Plan | None:
        if request.prior:  # the fastest shape a similar finished job measured (DLRover §4.3)
            best = max(request.prior, key=lambda r: r.steps_per_s)
            if best.shape.total().fits_within(request.free):
                return Plan(best.shape, Action.LAUNCH, f"goodput: the fastest shape a similar "
                            f"job measured ({best.steps_per_s:.3g} steps/s)")  # fmt: skip
        return super().launch_plan(request)

    # -- the rules --------------------------------------------------------------------
    def decide(self, observation: Observation) -> Plan | None:
        obs, p = observation, self.params
        if obs.events or obs.shape.n_ps or not obs.shape.workers:
            return None  # failures are the mechanism's; parameter servers another policy's
        steady = [s for s in obs.window[p.settle_samples:] if s.steps_per_s > 0]
        if len(steady) < p.grow_after_samples:
            return None
        # the median of every settled sample since the last move: a few slow ones (a script's
        # evaluation pass, a checkpoint) do not make a shape look slower than one before it
        speed = statistics.median(s.steps_per_s for s in steady)
        measured = self.measured(obs, speed)
        rules = (self.back_to_fastest, self.keep_what_helped, self.grow_in_place,
                 self.eq10_world) if len(steady) >= p.judge_samples else (self.grow_in_place,)
        for rule in rules:
            plan = rule(obs, speed, measured, steady)
            if plan is not None:
                return plan
        return None

    def measured(self, obs: Observation, speed: float) -> list[Measured]:
        """Every shape this policy left, at the speed it read there, and the current one."""
        found = []
        for before, plan in zip(obs.plans, obs.plans[1:], strict=False):
            if "from_speed" in plan.details:
                found.append(Measured(before.shape, float(plan.details["from_speed"])))
        return [*found, Measured(obs.shape, speed)]

    def back_to_fastest(self, obs, speed, measured, _steady) -> Plan | None:
        best = max(measured, key=lambda m: m.speed)
        if best.shape == obs.shape or speed >= (1 - self.params.min_gain) * best.speed:
            return None
        return self._plan(obs, best.shape, REVERT, speed,
                          f"back to the fastest shape measured ({best.speed:.3g} against "
                          f"{speed:.3g} steps/s now)")  # fmt: skip

    def keep_what_helped(self, obs, speed, measured, _steady) -> Plan | None:
        last = obs.last_plan
        if last is None or last.details.get("move") != GROW or len(measured) < 2:
            return None
        before = measured[-2]
        if speed >= (1 + self.params.min_gain) * before.speed or before.shape == obs.shape:
            return None
        return self._plan(obs, before.shape, GIVE_BACK, speed,
                          f"more cpu gained {speed / before.speed - 1:+.0%} (< "
                          f"{self.params.min_gain:.0%}): given back")  # fmt: skip

    def grow_in_place(self, obs, speed, measured, steady) -> Plan | None:
        p = self.params
        used, quota = self.rank_use(obs, steady)
        if used < p.saturation * quota or self.gave_back(obs):
            return None
        limit = obs.node_limit.cpu_cores if obs.node_limit else math.inf
        room = obs.headroom.cpu_cores / obs.shape.n_workers
        factor = math.inf if p.growth is None else p.growth
        cores = self.steps(min(quota * factor, quota + room, limit))
        if cores < quota + p.core_step:
            return None
        shape = self.ranks(obs, obs.shape.n_workers, cores)
        if not grows_within(obs, shape):
            return None
        return self._plan(obs, shape, GROW, speed,
                          f"ranks use {used:.2f} of {quota:.2f} cpu (>= {p.saturation:.0%}): "
                          f"{cores:g} cpu each, in place")  # fmt: skip

    def eq10_world(self, obs, speed, measured, steady) -> Plan | None:
        p = self.params
        used, quota = self.rank_use(obs, steady)
        if used >= p.saturation * quota and not self.gave_back(obs):
            return None  # held back by its quota: ŵ is not known yet (rule 3 measures it)
        w_hat = max(p.core_step, math.ceil(used / p.core_step - 1e-9) * p.core_step)
        c_total = min(obs.budget.cpu_cores, obs.shape.total().cpu_cores + obs.free.cpu_cores)
        n = obs.worker_range.clip(max(1, int(c_total // w_hat + 1e-9)))
        cores = self.steps(min(c_total / n, obs.node_limit.cpu_cores if obs.node_limit
                               else math.inf))  # fmt: skip
        shape = self.ranks(obs, n, cores)
        if n == obs.shape.n_workers or any(m.shape == shape for m in measured):
            return None
        if not grows_within(obs, shape):
            return None
        return self._plan(obs, shape, RESHAPE, speed,
                          f"ranks use {used:.2f} of {quota:.2f} cpu: w_hat {w_hat:.2g}, "
                          f"N_w = {c_total:g} / {w_hat:.2g} -> {n} ranks of {cores:g} cpu "
                          "(DLRover eq. 10 without servers)")  # fmt: skip

    # -- helpers ------------------------------------------------------------------------
    def rank_use(self, obs: Observation, steady) -> tuple[float, float]:
        """A rank's mean CPU used and its quota over the steady samples."""
        ranks = {n.name for n in obs.shape.workers}
        readings = [n for s in steady for n in s.nodes if n.name in ranks]
        if not readings:
            quota = obs.shape.workers[0].resources.cpu_cores
            return 0.0, quota
        return (statistics.fmean(n.cpu_used_cores for n in readings),
                statistics.fmean(n.cpu_allocated_cores for n in readings))  # fmt: skip

    def gave_back(self, obs: Observation) -> bool:
        """A growth in place was given back before: growing again would not help."""
        return any(plan.details.get("move") == GIVE_BACK for plan in obs.plans)

    def steps(self, cores: float) -> float:
        step = self.params.core_step
        return round(math.floor(cores / step + 1e-9) * step, 6)

    def ranks(self, obs: Observation, n: int, cores: float) -> ClusterShape:
        memory = max(w.resources.memory_bytes for w in obs.shape.workers)
        node = Resources(cores, memory)
        return ClusterShape.from_counts(0, n, node, node)

    def _plan(self, obs: Observation, shape: ClusterShape, move: str, speed: float,
              why: str) -> Plan:  # fmt: skip
        action = Action.SCALE_UP if move == GROW else (
            Action.ADD_WORKER if shape.n_workers > obs.shape.n_workers else
            Action.REMOVE_WORKER if shape.n_workers < obs.shape.n_workers else Action.RESHAPE
        )  # fmt: skip
        return Plan(shape, action, f"goodput: {why}", {"move": move, "from_speed": speed})

