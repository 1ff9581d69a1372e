"""NEARCHUS (Tariq et al., §IV): start a job small, then scale it up or out from what it uses.

The policy, as the paper describes it:

- **Launch** with ``R0`` of the budget ``R_max`` as (1 PS, 2 workers), the PS
  getting ``R0/3`` and the workers ``2·R0/3`` (DT-config ``(1, 2, R0/3, 2R0/3)``).
- **Stability Detector** (``nearchus_stability``): decide nothing until the
  job's CPU use and speed each have a coefficient of variation below 5% over
  ``N_comp = 5`` consecutive samples. The paper's samples make this take "5 to 8 minutes"; a stability
  sample here is the mean over ``stability_period_s`` (60 s) of the
  mechanism's metric samples, so the rule does not depend on how often the
  mechanism measures.
- **Scaling Engine**: ``e_job = Σu_i / Σa_i``. At ``e_job ≥ E_thd_job`` (0.95)
  scale up multiplicatively by ``R_up`` (50%), spread over the nodes in
  proportion to what each holds, capped by the budget, by what the cluster has
  free and by the largest node it can place. Below it, look for a PS network
  (PSN) bottleneck in the last ``N_net = 30`` samples of each PS since the last
  decision — more than 10% of them above 90% of the link — and add a PS;
  otherwise treat it as an MU bottleneck and add a worker, the role's CPU
  re-divided evenly (``r_wk / n_wk``).
- **Resource Optimizer** (``nearchus_optimizer``): node-level then
  component-level rebalancing at ``E_thd_opt = 0.8``. The paper runs it
  "periodically" beside the engine without fixing the order; here it runs when
  ``e_job`` is low and no PSN is found, *before* adding a worker, because a
  misplaced allocation (an idle PS next to busy workers) is not an MU
  bottleneck and adding a worker would not fix it.
- **Stop** when no improvement is left: once ``patience`` (2) moves in a row
  that did not add resources (add PS, add worker, rebalance) together raised
  the speed by less than ``min_gain``, the current shape is kept to the end
  ("the last DT-config is used till the end of the training job"). One
  fruitless move is allowed because a scale-out can be the step before the
  one that pays (a PS added while the workers are also at their MU cap).

Thresholds the paper does not give a number for (``R0``, ``min_gain``,
``min_step_cores``, ``stability_period_s``) are named parameters with our
documented choice. The policy is pure: everything it needs is in the
observation (window, history, plans).
"""

from __future__ import annotations

import math
from typing import Any

from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape
from rightsize.scaling.api import Observation, Plan, Policy
from rightsize.scaling.nearchus_params import NearchusParams, on_clock
from rightsize.scaling.nearchus_rules import (
    Rule,
    converged,
    first_proposal,
    min_step,
    nearchus_rules,
    psn_bottleneck,
    scale_up_factor,
)
from rightsize.scaling.nearchus_stability import StableWindow, stable_from_s, stable_window
from rightsize.scaling.pace import PAPER_METRIC_INTERVAL_S
from rightsize.scaling.params import with_overrides
from rightsize.scaling.shapes import one_ps_two_workers, require_budget

# What the policy's parameters and rules are, imported from here by its users and tests.
__all__ = ["NearchusParams", "NearchusPolicy", "on_clock", "psn_bottleneck", "scale_up_factor"]


class NearchusPolicy(Policy):
    """The faithful NEARCHUS policy (§IV). Parameters: see :class:`NearchusParams`."""

    name = "nearchus"

    def __init__(self, params: NearchusParams | None = None,
                 metric_interval_s: float = PAPER_METRIC_INTERVAL_S, **overrides: Any) -> None:  # fmt: skip
        self.params = on_clock(with_overrides(NearchusParams, params, overrides), metric_interval_s)
        #: The Scaling Engine and Resource Optimizer, in the order they are asked.
        self.rules: tuple[Rule, ...] = nearchus_rules(self.params)

    # -- launch -------------------------------------------------------------------------
    def initial_shape(self, budget: Resources, free: Resources) -> ClusterShape | None:
        """``(1, 2, R0/3, 2R0/3)`` if it fits in ``free``, else ``None`` (keep waiting);
        ``R0`` is at least ``launch_min_cores`` (within the budget).

        Raises:
            ResourceError: the budget is too small for three nodes at ``R0``.
        """
        p = self.params
        require_budget(self.name, budget, 3 * p.min_node_cores / p.r0, "R0 of it as 3 nodes")
        fraction = max(p.r0, p.launch_min_cores / budget.cpu_cores)
        start = budget.scaled(min(1.0, fraction))
        shape = one_ps_two_workers(Resources(start.cpu_cores, start.memory_bytes))
        return shape if shape.total().fits_within(free) else None

    # -- decisions ----------------------------------------------------------------------
    def decision_due_s(self, observation: Observation) -> float:
        """Not before the detector can have ``N_comp`` points; never once converged, or
        while the job would scale up but the budget or the cluster has no room."""
        # (An empty window, as at every restart, is never stable: no need to ask.)
        stable = self.stable(observation) if observation.window else None
        if stable is None:
            due = stable_from_s(observation.window, self.params, observation.time_s)
            return max(observation.time_s, due)
        if converged(self.params, observation, stable) or self.waiting_for_room(
            observation, stable
        ):
            return math.inf
        return observation.time_s

    def waiting_for_room(self, obs: Observation, stable: StableWindow) -> bool:
        """True if the job is efficient enough to grow but may not grow now."""
        room = obs.headroom.cpu_cores
        return stable.e_job >= self.params.e_thd_job and room < min_step(self.params, obs)

    def stable(self, observation: Observation) -> StableWindow | None:
        """The Stability Detector's verdict on ``observation.window``, computed once per
        window (``Observation.readings``: ``decide`` and ``decision_due_s`` read the same)."""
        params, window = self.params, observation.window
        return observation.readings.of(
            ("stable", params.stability_period_s, params.n_comp, params.cv_max),
            lambda: stable_window(window, params),
        )

    def decide(self, observation: Observation) -> Plan | None:
        """The first plan the rules propose once the metrics are stable."""
        stable = self.stable(observation)
        if stable is None:
            return None
        return first_proposal(self.rules, observation, stable, self.params.e_thd_job)
