"""NEARCHUS's Scaling Engine and Resource Optimizer (§IV) as an ordered list of rules.

A rule looks at a job whose metrics the Stability Detector accepted and proposes a plan,
or nothing; the policy walks its list and takes the first proposal. Written as data, the
faithful engine reads as §IV does —

1. ``stop``: no improvement left, keep the shape to the end;
2. ``scale_up``: ``e_job ≥ E_thd_job``, grow by ``R_up``;
3. ``add_ps``: ``e_job < E_thd_job`` and a PSN bottleneck, add a PS;
4. ``rebalance``: the Resource Optimizer (see ``nearchus.py`` for why before add-worker);
5. ``add_worker``: ``e_job < E_thd_job``, no PSN, an MU bottleneck: add a worker —

and a variant (nearchus+) is this list with named rules replaced and others inserted
(:func:`replaced`, :func:`inserted`), not a subclass overriding methods.

Each rule says which side of the engine's ``e_job ≥ E_thd_job`` test it answers
(:class:`Branch`); the walk skips a rule on the other side. A rule may also answer
:data:`KEEP` — "keep the shape, and ask no later rule" — which is how ``stop`` ends the walk.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import ClassVar, Protocol

from rightsize.core.shape import NodeRole
from rightsize.scaling import nearchus_optimizer
from rightsize.scaling.api import Action, MetricSample, Observation, Plan
from rightsize.scaling.nearchus_params import NearchusParams
from rightsize.scaling.nearchus_stability import StableWindow
from rightsize.scaling.shapes import rounding_room, scaled_out, scaled_up

SCALE_OUT_ACTIONS = (Action.ADD_PS, Action.ADD_WORKER)


class Keep:
    """A rule's answer "keep the current shape, and ask no later rule" (see :data:`KEEP`)."""

    def __repr__(self) -> str:
        return "KEEP"


KEEP = Keep()

#: What a rule answers: a plan, :data:`KEEP`, or ``None`` (nothing to propose: ask the next).
Proposal = Plan | Keep | None


class Branch(Enum):
    """The side of the Scaling Engine's ``e_job ≥ E_thd_job`` test a rule answers."""

    SCALE_UP = "e_job >= E_thd_job"
    SCALE_OUT = "e_job < E_thd_job"


class Rule(Protocol):
    """One step of the engine: ``propose(observation, stable)`` on a stable window."""

    name: ClassVar[str]
    branch: ClassVar[Branch | None]  # None: either side

    def propose(self, observation: Observation, stable: StableWindow) -> Proposal: ...


def first_proposal(
    rules: Sequence[Rule], observation: Observation, stable: StableWindow, e_thd_job: float | None
) -> Plan | None:
    """The first plan ``rules`` propose, in order (``None`` for :data:`KEEP` or no proposal).
    With ``e_thd_job``, a rule for the other side of ``e_job ≥ e_thd_job`` is skipped; without,
    every rule is asked (a reading other than the engine's test chose them)."""
    side = None
    if e_thd_job is not None:
        side = Branch.SCALE_UP if stable.e_job >= e_thd_job else Branch.SCALE_OUT
    for rule in rules:
        if side is not None and rule.branch is not None and rule.branch is not side:
            continue
        proposal = rule.propose(observation, stable)
        if proposal is not None:
            return proposal if isinstance(proposal, Plan) else None
    return None


def index_of(rules: Sequence[Rule], name: str) -> int:
    """Where the rule called ``name`` is in ``rules`` (``KeyError`` if it is not there)."""
    for i, rule in enumerate(rules):
        if rule.name == name:
            return i
    raise KeyError(f"no rule {name!r} in {[r.name for r in rules]}")


def replaced(rules: Sequence[Rule], name: str, rule: Rule) -> tuple[Rule, ...]:
    """``rules`` with the rule called ``name`` replaced by ``rule``, in its place."""
    i = index_of(rules, name)
    return (*rules[:i], rule, *rules[i + 1 :])


def inserted(
    rules: Sequence[Rule], rule: Rule, *, after: str | None = None, before: str | None = None
) -> tuple[Rule, ...]:
    """``rules`` with ``rule`` inserted right after (or before) the rule of that name."""
    if (after is None) == (before is None):
        raise ValueError("insert after one rule or before one")
    i = index_of(rules, after) + 1 if after is not None else index_of(rules, before)
    return (*rules[:i], rule, *rules[i:])


# -- what the rules read ---------------------------------------------------------------------
def min_step(params: NearchusParams, obs: Observation) -> float:
    """The least CPU worth a move: ``min_step_cores``, or less for a small job."""
    return min(params.min_step_cores, params.min_step_fraction * obs.budget.cpu_cores)


def converged(params: NearchusParams, obs: Observation, stable: StableWindow) -> bool:
    """True once the last ``patience`` scale-outs (rebalances aside) did not pay off.

    The speed to beat is the best measured on the shape before those
    scale-outs or on its rebalanced versions (the plans from the move that
    made it up to the first of them).
    """
    n = params.patience
    moves = [i for i, plan in enumerate(obs.plans) if plan.action != Action.REBALANCE]
    if len(moves) < n + 1:
        return False
    if any(obs.plans[i].action not in SCALE_OUT_ACTIONS for i in moves[-n:]):
        return False
    before = [plan.shape for plan in obs.plans[moves[-n - 1] : moves[-n]]]
    speeds = [r.steps_per_s for r in obs.history if r.shape in before]
    if not speeds:
        return False
    return stable.speed < max(speeds) * (1 + params.min_gain)


def psn_bottleneck(window: Sequence[MetricSample], params: NearchusParams) -> str | None:
    """The first PS whose last ``N_net`` link samples are more than ``psn_sample_fraction``
    above ``psn_link_utilization`` of capacity, or ``None`` (NEARCHUS §IV)."""
    recent = window[-params.n_net :]
    last = recent[-1].nodes if recent else None
    names = (
        [n for n, r in zip(last.names, last.roles, strict=True) if r == NodeRole.PS] if last else []
    )
    for name in names:
        utils = [u for s in recent if (u := s.nodes.net_utilization_of(name)) is not None]
        hot = sum(1 for u in utils if u > params.psn_link_utilization)
        if utils and hot / len(utils) > params.psn_sample_fraction:
            return name
    return None


def scale_up_factor(obs: Observation, r_up: float) -> float:
    """The growth factor ``≤ R_up`` the budget, the cluster and the node limit allow."""
    total = obs.shape.total()
    head = rounding_room(obs, len(obs.shape.nodes))
    factor = r_up
    if total.cpu_cores:
        factor = min(factor, head.cpu_cores / total.cpu_cores)
    if total.memory_bytes:
        factor = min(factor, head.memory_bytes / total.memory_bytes)
    if obs.node_limit is not None:
        for node in obs.shape.nodes:
            res = node.resources
            if res.cpu_cores:
                factor = min(factor, obs.node_limit.cpu_cores / res.cpu_cores - 1)
            if res.memory_bytes and obs.node_limit.memory_bytes:
                factor = min(factor, obs.node_limit.memory_bytes / res.memory_bytes - 1)
    return max(factor, 0.0)


# -- the faithful rules ----------------------------------------------------------------------
@dataclass(frozen=True)
class Stop:
    """Keep the shape once no improvement is left ("the last DT-config is used till the end")."""

    params: NearchusParams
    name: ClassVar[str] = "stop"
    branch: ClassVar[Branch | None] = None

    def propose(self, obs: Observation, stable: StableWindow) -> Proposal:
        return KEEP if converged(self.params, obs, stable) else None


@dataclass(frozen=True)
class ScaleUp:
    """Grow multiplicatively by ``R_up``, spread over the nodes in proportion to what each
    holds, within the budget, the cluster's free CPU and the largest node."""

    params: NearchusParams
    name: ClassVar[str] = "scale_up"
    branch: ClassVar[Branch | None] = Branch.SCALE_UP

    def propose(self, obs: Observation, stable: StableWindow) -> Proposal:
        p = self.params
        factor = scale_up_factor(obs, p.r_up)
        extra_cores = obs.shape.total().cpu_cores * factor
        if extra_cores <= 0 or extra_cores < min_step(p, obs):
            return None
        return Plan(
            scaled_up(obs.shape, factor),
            Action.SCALE_UP,
            f"e_job {stable.e_job:.2f} >= {p.e_thd_job}: scale up by {factor:.0%} "
            f"(+{extra_cores:.3g} cpu)",
            {"e_job": stable.e_job, "factor": factor},
        )


@dataclass(frozen=True)
class AddPs:
    """A PSN bottleneck (:func:`psn_bottleneck`): add a PS."""

    params: NearchusParams
    name: ClassVar[str] = "add_ps"
    branch: ClassVar[Branch | None] = Branch.SCALE_OUT

    def propose(self, obs: Observation, stable: StableWindow) -> Proposal:
        ps = psn_bottleneck(obs.window, self.params)
        if ps is None:
            return None
        return Plan(
            scaled_out(obs.shape, NodeRole.PS),
            Action.ADD_PS,
            f"e_job {stable.e_job:.2f} < {self.params.e_thd_job} and PSN bottleneck on {ps}: "
            "add a PS",
            {"e_job": stable.e_job, "hot_ps": ps},
        )


@dataclass(frozen=True)
class Rebalance:
    """The Resource Optimizer: node level, then component level (``nearchus_optimizer``)."""

    params: NearchusParams
    name: ClassVar[str] = "rebalance"
    branch: ClassVar[Branch | None] = None

    def propose(self, obs: Observation, stable: StableWindow) -> Proposal:
        p = self.params
        used = stable.node_used()
        limit = obs.node_limit.cpu_cores if obs.node_limit else math.inf
        shape = nearchus_optimizer.optimize(
            obs.shape, used, p.e_thd_opt, p.reclaim_fraction, p.min_node_cores, limit
        )
        moved = 0.0 if shape is None else nearchus_optimizer.cpu_moved(obs.shape, shape)
        if shape is None or moved < min_step(p, obs):
            return None
        return Plan(
            shape,
            Action.REBALANCE,
            f"a node below E_thd_opt {p.e_thd_opt}: move {moved:.3g} idle cpu between nodes",
            {"e_job": stable.e_job, "moved_cores": moved},
        )


@dataclass(frozen=True)
class AddWorker:
    """An MU bottleneck: add a worker, the workers' CPU re-divided evenly."""

    params: NearchusParams
    name: ClassVar[str] = "add_worker"
    branch: ClassVar[Branch | None] = Branch.SCALE_OUT

    def propose(self, obs: Observation, stable: StableWindow) -> Proposal:
        shape = scaled_out(obs.shape, NodeRole.WORKER)
        if min(n.resources.cpu_cores for n in shape.workers) < self.params.min_node_cores:
            return None
        return Plan(
            shape,
            Action.ADD_WORKER,
            f"e_job {stable.e_job:.2f} < {self.params.e_thd_job}, no PSN: MU bottleneck, "
            "add a worker",
            {"e_job": stable.e_job},
        )


def nearchus_rules(params: NearchusParams) -> tuple[Rule, ...]:
    """The faithful engine's rules, in §IV's order (the optimizer before add-worker)."""
    return (Stop(params), ScaleUp(params), AddPs(params), Rebalance(params), AddWorker(params))
