"""nearchus+: rightsize's improvement of NEARCHUS, kept apart from the faithful policy.

The faithful policy (``nearchus``) has two blind spots that the simulator
exposes whenever a PS's CPU demand grows with the job's speed (it applies
every worker's update, so it does):

1. **Rebalancing overshoots.** The component-level adjustment moves the PS's
   idle CPU to the workers without regard to the speed that will follow; the
   workers then run faster and the PS — left with what it used at the old
   speed, or a tenth of its idle CPU more by default — saturates (PSC). Read
   literally (all idle CPU moved), the workers idle, the next adjustment moves
   the CPU back, and the job oscillates at its launch size.
2. **PSC between 0.8 and 0.95 is invisible.** With the PS saturated and the
   workers at 80-95% efficiency, neither the optimizer (both components above
   ``E_thd_opt``) nor the PSN check fires, so the engine adds workers, which
   cannot help.

3. **A starved job never scales up.** NEARCHUS grows only at ``e_job ≥ E_thd_job``,
   when every node is busy. On a job given too little CPU the bottleneck
   node — usually the PS, which applies every worker's update — uses all of
   its CPU while the nodes that wait on it do not, so ``e_job`` stays below
   0.95 however starved the job is: on real jobs here a wide-deep job at 0.6 of
   its 2-CPU budget read 0.83-0.94 for its whole run (benchmarks/
   runtime_rightsizing.py, too-small start), and the faithful engine read an MU
   bottleneck and added workers, which cannot help.

nearchus+ keeps the faithful launch, stability detector, scale-up rule, PSN
check and stop rule, and changes eleven things. It is NEARCHUS's list of rules
(``nearchus_rules``) with five of them replaced by name and three added
(:func:`nearchus_plus_rules`: ``stop`` -> ``stop+``, ``scale_up`` -> ``scale_up+``,
``add_ps`` -> ``add_ps+``, ``rebalance`` -> ``rebalance+``, ``add_worker`` ->
``add_worker+``; ``finished`` before ``stop+``, ``grow_saturated`` after ``add_ps+``,
``grow_starved`` after ``rebalance+``), its memory in typed notes (:class:`PlusNotes`):

- **Balanced split** (fixes 1 and 2): when the PS is idle (``e_ps < E_thd_opt``)
  or saturated (``e_ps ≥ E_thd_job``) while the workers are not, divide the
  job's CPU between the components by their measured cost per step
  (``c = used cores / steps per s``), sizing the PS for the speed the workers
  will reach, with ``ps_slack`` (20%) to spare.
- **Grow a busy job** (fixes 3): when the PS uses at least ``E_thd_job`` of its
  CPU or PS and workers both use at least ``E_thd_opt`` of theirs, no PSN
  bottleneck is found and the budget has room,
  grow the job's CPU to what the budget and the cluster allow in one move,
  divided between PS and workers by the balanced split (the PS sized for the
  speed the workers will reach), workers added as in the one-move scale-up.
- **Grow a job with saturated workers** (fixes 3 when the PS is the idle one): when
  the workers use at least ``E_thd_job`` of their CPU and the rebalance has nothing
  left to move (the idle PS at its floor), grow as above instead of reading an MU
  bottleneck, which workers that would use more cannot have
  (rule ``grow_starved``).
- **Scale out by what was measured**: an MU bottleneck — read only when the workers
  use less than ``E_thd_opt`` of their CPU (real workers that wait on their PS read
  0.85-0.94 and are not allocated more than they can use; adding one cost a restart
  of 11-14 s on wide-deep here for no gain) — adds as many workers as
  the workers' CPU needs at what one worker manages to use (``⌈r_wk / u_wk⌉``),
  a PSN bottleneck as many PS as the busiest link needs to fall to the PSN
  threshold — each at most ``max_scale_out`` times the current count — in one
  restart instead of one node per restart.
- **Scale up in one move**: with no bottleneck in sight, grow straight to what
  the budget and the cluster allow (up to ``max_r_up``) instead of by ``R_up``,
  but let each worker's CPU grow by at most ``R_up`` (and not past a measured
  MU cap) — the rest arrives as more workers — and add PS so that the busiest
  link, scaled by the growth, stays under the PSN threshold.
- **Revert to the best shape** when the search stops on a shape slower than one
  it already ran, instead of keeping the last one.
- **Balance nodes only when they differ** by more than ``node_spread`` in
  efficiency, so noise alone does not trigger a restart.
- **Act on an evident imbalance without waiting for stability**: a PS saturated in
  every one of the last ``N_comp`` points, or idle in every one while the workers
  are busy, or workers idle in every one, is a steady reading however much the speed
  varies — grow the job, rebalance it, or run the engine's PSN and MU checks then
  (:func:`evident_imbalance`). On real jobs here a 2-s interval's
  speed varies by 5-10% (samples/s from a few hundred steps), so the 5% CV test
  can hold the first decision of a starved job for tens of seconds
  (benchmarks/run/runtime_rightsizing.py, docs/benchmarks.md).
- **Fold an idle PS** into the others when the servers are idle beside busy workers
  and the busiest link would stay under ``fold_link_max`` (half its capacity) with
  one PS fewer; NEARCHUS only adds PS, so a job started with too many keeps paying
  for them (:func:`fold_idle_ps`).
- **Grow ranks in place** (a job of workers alone: allreduce, a script's ranks): each
  worker's CPU grows up to the node limit or a measured MU cap, to the same whole number
  of millicores for every rank (so that a rank grown to the budget gets its whole cores'
  threads), with no restart; ranks are added only for an MU bottleneck
  (``grow_ranks_in_place``). NEARCHUS's per-worker ``R_up`` keeps a PS job's workers near
  the size the paper measured them at; a rank that grows in place pays no restart, and
  one rank of 2 CPU trained a script 1.2-1.5x faster than two of 1 here. (A job without
  PS also no longer reads an empty rebalance — no PS share to move — as a move, which
  had kept the MU rule from ever answering an idle rank.)
- Everything else, and every threshold, is the faithful policy's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape, NodeRole
from rightsize.scaling import nearchus_optimizer
from rightsize.scaling.api import Action, Observation, Plan
from rightsize.scaling.nearchus import NearchusPolicy
from rightsize.scaling.nearchus_params import NearchusPlusParams, on_clock
from rightsize.scaling.nearchus_plus_readings import (
    Evident,
    Imbalance,
    balanced_ps_cores,
    costs_per_step,
    evident_imbalance,
    max_link_utilization,
    role_efficiencies,
    saturated_ranks,
    with_role_total,
)
from rightsize.scaling.nearchus_rules import (
    KEEP,
    Branch,
    Proposal,
    Rule,
    converged,
    first_proposal,
    inserted,
    min_step,
    nearchus_rules,
    psn_bottleneck,
    replaced,
)
from rightsize.scaling.nearchus_stability import StableWindow
from rightsize.scaling.pace import PAPER_METRIC_INTERVAL_S
from rightsize.scaling.params import with_overrides
from rightsize.scaling.shapes import (
    MILLICORE,
    grows_within,
    redistributed,
    rounding_room,
    scaled_out,
)

# Imported from here by the policy's users and tests.
__all__ = ["NearchusPlusParams", "NearchusPlusPolicy", "PlusNotes", "balanced_ps_cores"]

MAX_NODES_ROUNDING = 64  # leave rounding room for this many nodes when growing in one move


@dataclass(frozen=True)
class PlusNotes:
    """What nearchus+ remembers about a job, carried by the plans it made.

    A policy is pure: its memory is the plans applied so far (``Observation.plans``). These
    notes travel in a plan's ``details``, the form every mechanism keeps and the runtime
    stores with its timeline (a resumed job's plans come back from it), under the keys below;
    the policy reads and writes them only through this class.

    Attributes:
        final: the search stopped on this plan: keep its shape to the end.
        worker_mu: the CPU one worker managed to use when an MU bottleneck was read (cores),
            a cap for later growth; None if none was read.
    """

    final: bool = False
    worker_mu: float | None = None

    FINAL_KEY: ClassVar[str] = "final"
    WORKER_MU_KEY: ClassVar[str] = "worker_mu"

    @classmethod
    def of(cls, plan: Plan | None) -> PlusNotes:
        """The notes ``plan`` carries (none for no plan, or one nearchus+ did not make)."""
        if plan is None:
            return cls()
        mu = plan.details.get(cls.WORKER_MU_KEY)
        return cls(cls.final_in(plan), None if mu is None else float(mu))

    @classmethod
    def final_in(cls, plan: Plan | None) -> bool:
        """:attr:`final` of the notes ``plan`` carries, without making them (asked at every
        decision)."""
        return plan is not None and bool(plan.details.get(cls.FINAL_KEY))

    def details(self) -> dict[str, float]:
        """The notes as plan ``details`` entries (only those set)."""
        out: dict[str, float] = {}
        if self.final:
            out[self.FINAL_KEY] = 1.0
        if self.worker_mu is not None:
            out[self.WORKER_MU_KEY] = self.worker_mu
        return out


def finished(obs: Observation) -> bool:
    """True once a plan said the search is over (:attr:`PlusNotes.final`)."""
    return PlusNotes.final_in(obs.last_plan)


def known_mu(obs: Observation) -> PlusNotes:
    """The MU cap a worker showed earlier in this job, if any, as notes to carry on."""
    for plan in reversed(obs.plans):
        mu = PlusNotes.of(plan).worker_mu
        if mu is not None:
            return PlusNotes(worker_mu=mu)
    return PlusNotes()


# -- growing in one move ---------------------------------------------------------------------
def growth_cores(p: NearchusPlusParams, obs: Observation) -> float:
    """The CPU the job may grow by in one move: its headroom less a millicore for each
    of up to ``MAX_NODES_ROUNDING`` nodes (how many it will have is not known yet), or
    for a job of ranks alone that grows in place, up to the same whole number of
    millicores for every rank. (A rank grown to 1.936 of 2 CPU runs one torch thread,
    ``floor`` of its share: on real scripts here it used one core of them, and the MU
    rule then read a bottleneck and split it into two ranks of one core, a shape slower
    than one rank of two.)"""
    shape = obs.shape
    if shape.n_ps or not p.grow_ranks_in_place:
        return rounding_room(obs, MAX_NODES_ROUNDING).cpu_cores
    reachable = shape.total().cpu_cores + obs.headroom.cpu_cores
    each = math.floor(reachable / shape.n_workers / MILLICORE + 1e-9) * MILLICORE
    return max(0.0, each * shape.n_workers - shape.total().cpu_cores)


def grown_counts(
    p: NearchusPlusParams, obs: Observation, factor: float, ps_cores: float, wk_cores: float
) -> tuple[int, int]:
    """PS and workers for a job grown by ``factor`` to ``ps_cores`` and ``wk_cores``.

    Each worker's CPU grows by at most ``R_up`` (and never past a measured MU cap),
    the rest arriving as more workers; the PS count grows so that the busiest PS
    link, scaled by the growth, stays under the PSN threshold.
    """
    shape = obs.shape
    per_worker = max(w.resources.cpu_cores for w in shape.workers) * (1 + p.r_up)
    per_worker = max(per_worker, p.mu_free_cores)
    if shape.n_ps == 0 and p.grow_ranks_in_place:
        per_worker = math.inf  # up to the node limit or a measured MU cap: no restart
    mu = known_mu(obs).worker_mu
    per_worker = min(per_worker, per_worker if mu is None else mu)
    if obs.node_limit is not None:
        per_worker = min(per_worker, obs.node_limit.cpu_cores)
    n_wk = max(shape.n_workers, math.ceil(wk_cores / per_worker - 1e-9))
    link = max_link_utilization(obs.window[-p.n_net :])
    n_ps = max(shape.n_ps, math.ceil(shape.n_ps * link * (1 + factor) / p.psn_link_utilization))
    if obs.node_limit is not None:
        n_ps = max(n_ps, math.ceil(ps_cores / obs.node_limit.cpu_cores - 1e-9))
    return n_ps, n_wk


def grown_split(
    p: NearchusPlusParams, obs: Observation, factor: float, ps_cores: float, wk_cores: float
) -> ClusterShape:
    """``obs.shape`` grown by ``factor`` with ``ps_cores`` and ``wk_cores`` for the
    roles; node counts as :func:`grown_counts` picks them, memory per node kept."""
    shape = obs.shape
    n_ps, n_wk = grown_counts(p, obs, factor, ps_cores, wk_cores)
    wk_memory = shape.role_total(NodeRole.WORKER).memory_bytes // shape.n_workers
    grown = scaled_out(shape, NodeRole.PS, n_ps - shape.n_ps)
    grown = scaled_out(grown, NodeRole.WORKER, n_wk - shape.n_workers)
    if shape.n_ps:  # (a job of workers alone has no PS to size)
        ps_memory = shape.role_total(NodeRole.PS).memory_bytes // shape.n_ps
        grown = redistributed(grown, NodeRole.PS, Resources(ps_cores, ps_memory * n_ps))
    return redistributed(grown, NodeRole.WORKER, Resources(wk_cores, wk_memory * n_wk))


def grown_by(p: NearchusPlusParams, obs: Observation, factor: float) -> ClusterShape:
    """``obs.shape`` with each role's total grown by ``factor``, counts by :func:`grown_counts`."""
    shape = obs.shape
    ps_total = shape.role_total(NodeRole.PS).scaled(1 + factor)
    wk_total = shape.role_total(NodeRole.WORKER).scaled(1 + factor)
    n_ps, n_wk = grown_counts(p, obs, factor, ps_total.cpu_cores, wk_total.cpu_cores)
    grown = scaled_out(shape, NodeRole.PS, n_ps - shape.n_ps)
    grown = scaled_out(grown, NodeRole.WORKER, n_wk - shape.n_workers)
    grown = redistributed(grown, NodeRole.PS, ps_total)
    return redistributed(grown, NodeRole.WORKER, wk_total)


def grow(p: NearchusPlusParams, obs: Observation, stable: StableWindow, busy: str) -> Plan | None:
    """Grow the job to what the budget and the cluster allow (up to ``max_r_up``), the
    PS share from the measured cost per step (:func:`balanced_ps_cores`), each node
    keeping its memory and new workers a worker's memory; ``busy`` says why."""
    shape = obs.shape
    if stable.speed <= 0:
        return None
    used = stable.node_used()
    e_ps, e_wk = role_efficiencies(shape, used)
    total = shape.total().cpu_cores
    extra = min(growth_cores(p, obs), total * p.max_r_up)
    c_ps, c_wk = costs_per_step(shape, used, stable.speed)
    if extra < max(min_step(p, obs), MILLICORE) or c_wk <= 0:
        return None
    grown_total = total + extra
    ps_cores = balanced_ps_cores(grown_total, c_ps, c_wk, p.ps_slack)
    ps_cores = max(ps_cores, p.min_node_cores * shape.n_ps)
    shape = grown_split(p, obs, extra / total, ps_cores, grown_total - ps_cores)
    if not grows_within(obs, shape):
        return None
    return Plan(
        shape,
        Action.SCALE_UP,
        f"{busy} (e_ps {e_ps:.2f}, e_wk {e_wk:.2f}; e_job {stable.e_job:.2f}): "
        f"grow by {extra:.3g} cpu to {shape.describe()}, PS and workers by cost per step",
        {"e_job": stable.e_job, "factor": extra / total, **known_mu(obs).details()},
    )


# -- rebalancing -----------------------------------------------------------------------------
def uneven(p: NearchusPlusParams, shape: ClusterShape, used: dict[str, float]) -> bool:
    """True if some component's node efficiencies differ by more than ``node_spread``."""
    for role in NodeRole:
        effs = [used[n.name] / n.resources.cpu_cores for n in shape.role(role)]
        if len(effs) > 1 and max(effs) - min(effs) > p.node_spread:
            return True
    return False


def balanced_split(
    p: NearchusPlusParams,
    shape: ClusterShape,
    used: dict[str, float],
    stable: StableWindow,
    limit: float,
) -> ClusterShape | None:
    """The job's CPU split between PS and workers by their measured cost per step, when
    the PS is idle beside busy workers or saturated beside idle ones; else None."""
    e_ps, e_wk = role_efficiencies(shape, used)
    ps_idle = e_ps < p.e_thd_opt <= e_wk
    ps_saturated = e_ps >= p.e_thd_job > e_wk
    if not (ps_idle or ps_saturated) or stable.speed <= 0:
        return None
    c_ps, c_wk = costs_per_step(shape, used, stable.speed)
    if c_wk <= 0:
        return None
    total = shape.total().cpu_cores
    floor = p.min_node_cores * len(shape.ps)
    ps_cores = max(floor, balanced_ps_cores(total, c_ps, c_wk, p.ps_slack))
    ps_cores = min(ps_cores, total - p.min_node_cores * len(shape.workers))
    ps_held = shape.role_total(NodeRole.PS).cpu_cores
    wk_room = nearchus_optimizer.proportional_room(shape.workers, limit)
    ps_room = nearchus_optimizer.proportional_room(shape.ps, limit)
    ps_cores = min(max(ps_cores, ps_held - wk_room), ps_held + ps_room)
    shape = with_role_total(shape, NodeRole.PS, ps_cores)
    return with_role_total(shape, NodeRole.WORKER, total - ps_cores)


def fold_idle_ps(p: NearchusPlusParams, obs: Observation, stable: StableWindow) -> Plan | None:
    """One PS fewer, when the PS are idle beside busy workers and the links allow it.

    NEARCHUS only ever adds PS (for the link, PSN); a job started with more servers
    than it needs keeps them, each with CPU for its own process and its share of every
    step's requests. With the PS idle (``e_ps < E_thd_opt ≤ e_wk``) and the busiest
    link, carrying ``n/(n−1)`` times its traffic, under ``fold_link_max``, the
    last PS's shards go to the others (their memory total kept, so each holds more) and
    the job's CPU is split by the measured cost per step as the balanced rebalance does
    — the cost measured with more servers, an upper bound for fewer. The job's total is
    kept: growing into the budget's room in the same move (the workers were saturated)
    was not faster in a single trial on wide-deep here, and the busy-job rule grows the
    job once the new shape is measured.
    """
    shape = obs.shape
    if not p.fold_idle_ps or shape.n_ps < 2 or stable.speed <= 0:
        return None
    used = stable.node_used()
    e_ps, e_wk = role_efficiencies(shape, used)
    link = max_link_utilization(stable.samples) * shape.n_ps / (shape.n_ps - 1)
    if not e_ps < p.e_thd_opt <= e_wk or link >= p.fold_link_max:
        return None
    c_ps, c_wk = costs_per_step(shape, used, stable.speed)
    if c_wk <= 0:
        return None
    total, n_ps = shape.total().cpu_cores, shape.n_ps - 1
    limit = obs.node_limit.cpu_cores if obs.node_limit else math.inf
    ps_cores = max(p.min_node_cores * n_ps, balanced_ps_cores(total, c_ps, c_wk, p.ps_slack))
    ps_cores = min(ps_cores, n_ps * limit, total - p.min_node_cores * shape.n_workers)
    memory = shape.role_total(NodeRole.PS).memory_bytes
    fewer = shape.without_node(shape.ps[-1].name)
    fewer = redistributed(fewer, NodeRole.PS, Resources(ps_cores, memory))
    folded = with_role_total(fewer, NodeRole.WORKER, total - ps_cores)
    if max(n.resources.cpu_cores for n in folded.workers) > limit:
        return None
    return Plan(
        folded,
        Action.RESHAPE,
        f"PS idle (e_ps {e_ps:.2f}, e_wk {e_wk:.2f}), busiest link {link:.0%} with one PS "
        f"fewer: fold {shape.ps[-1].name} into the others, PS and workers by cost per step",
        {"e_job": stable.e_job, "removed_ps": shape.ps[-1].name},
    )


def scale_out_count(p: NearchusPlusParams, current: int, wanted: float) -> int:
    """Nodes to add: ``⌈wanted⌉ − current``, at least 1, at most ``max_scale_out``x."""
    limit = max(1, int(current * (p.max_scale_out - 1)))
    return min(max(1, math.ceil(wanted - 1e-9) - current), limit)


# -- the rules nearchus+ replaces or adds ----------------------------------------------------
@dataclass(frozen=True)
class Finished:
    """Added before ``stop``: once the search ended (:attr:`PlusNotes.final`), nothing more."""

    params: NearchusPlusParams
    name: ClassVar[str] = "finished"
    branch: ClassVar[Branch | None] = None

    def propose(self, obs: Observation, stable: StableWindow) -> Proposal:
        return KEEP if finished(obs) else None


@dataclass(frozen=True)
class RevertToBest:
    """Replaces ``stop``: when no improvement is left, go back to the fastest shape run so
    far if it beat the current one, else keep this one — either way, the search is over."""

    params: NearchusPlusParams
    name: ClassVar[str] = "stop+"
    branch: ClassVar[Branch | None] = None

    def propose(self, obs: Observation, stable: StableWindow) -> Proposal:
        if not converged(self.params, obs, stable):
            return None
        final = PlusNotes(final=True).details()
        best = max(obs.history, key=lambda r: r.steps_per_s)
        better = best.steps_per_s > stable.speed * (1 + self.params.min_gain)
        if not better or not best.shape.total().fits_within(obs.shape.total() + obs.free):
            return Plan(obs.shape, Action.RESHAPE, "no improvement left: keep", final)
        return Plan(
            best.shape,
            Action.RESHAPE,
            f"no improvement left: back to the fastest shape ({best.steps_per_s:.3g} steps/s "
            f"> {stable.speed:.3g})",
            final,
        )


@dataclass(frozen=True)
class ScaleUpInOneMove:
    """Replaces ``scale_up``: grow to what the budget and the cluster allow in one move, out
    as well as up. Per-worker CPU grows by at most ``R_up`` (and never past the MU cap a
    worker showed before), so the extra CPU arrives as more workers; the PS count grows so
    that the busiest PS link, scaled by the growth, stays under the PSN threshold."""

    params: NearchusPlusParams
    name: ClassVar[str] = "scale_up+"
    branch: ClassVar[Branch | None] = Branch.SCALE_UP

    def propose(self, obs: Observation, stable: StableWindow) -> Proposal:
        p = self.params
        total = obs.shape.total()
        room = rounding_room(obs, MAX_NODES_ROUNDING)
        factor = min(p.max_r_up, growth_cores(p, obs) / total.cpu_cores if total.cpu_cores else 0.0)
        if total.memory_bytes:
            factor = min(factor, room.memory_bytes / total.memory_bytes)
        if total.cpu_cores * factor < max(min_step(p, obs), MILLICORE):
            return None
        shape = grown_by(p, obs, factor)
        return Plan(
            shape,
            Action.SCALE_UP,
            f"e_job {stable.e_job:.2f} >= {p.e_thd_job}: scale up by {factor:.0%} to "
            f"{shape.describe()}",
            {"e_job": stable.e_job, "factor": factor, **known_mu(obs).details()},
        )


@dataclass(frozen=True)
class AddPsForTheLink:
    """Replaces ``add_ps``: enough PS for the busiest link to fall to the PSN threshold."""

    params: NearchusPlusParams
    name: ClassVar[str] = "add_ps+"
    branch: ClassVar[Branch | None] = Branch.SCALE_OUT

    def propose(self, obs: Observation, stable: StableWindow) -> Proposal:
        p = self.params
        ps = psn_bottleneck(obs.window, p)
        if ps is None:
            return None
        busiest = max_link_utilization(obs.window[-p.n_net :]) or 1.0
        n = obs.shape.n_ps
        count = scale_out_count(p, n, n * busiest / p.psn_link_utilization)
        return Plan(
            scaled_out(obs.shape, NodeRole.PS, count),
            Action.ADD_PS,
            f"e_job {stable.e_job:.2f} < {p.e_thd_job} and PSN bottleneck on {ps} "
            f"(links up to {busiest:.0%}): add {count} PS",
            {"e_job": stable.e_job, "hot_ps": ps},
        )


@dataclass(frozen=True)
class GrowSaturated:
    """Added after ``add_ps``: grow a job whose PS is saturated, or whose PS and workers are
    both busy.

    A saturated PS (``e_ps ≥ E_thd_job``: PSC) or both components at least
    ``E_thd_opt`` busy means ``e_job`` is below ``E_thd_job`` because nodes wait on
    each other, not because the job cannot use more CPU (no component is idle, which
    the rebalance would fix), so it grows (:func:`grow`). (In the simulator a job whose
    components are both this busy reads ``e_job ≥ E_thd_job``, so this rule changes
    nothing simulated.)
    """

    params: NearchusPlusParams
    name: ClassVar[str] = "grow_saturated"
    branch: ClassVar[Branch | None] = Branch.SCALE_OUT

    def propose(self, obs: Observation, stable: StableWindow) -> Proposal:
        p = self.params
        e_ps, e_wk = role_efficiencies(obs.shape, stable.node_used())
        saturated_ps = e_ps >= p.e_thd_job
        if not (saturated_ps or min(e_ps, e_wk) >= p.e_thd_opt):
            return None
        return grow(p, obs, stable, "PS saturated" if saturated_ps else "PS and workers busy")


@dataclass(frozen=True)
class BalancedRebalance:
    """Replaces ``rebalance``: an idle PS folded into the others (:func:`fold_idle_ps`), else
    node-level balancing (faithful, only for a spread above ``node_spread``), then the
    balanced PS/worker split (:func:`balanced_split`)."""

    params: NearchusPlusParams
    name: ClassVar[str] = "rebalance+"
    branch: ClassVar[Branch | None] = None

    def propose(self, obs: Observation, stable: StableWindow) -> Proposal:
        p = self.params
        folded = fold_idle_ps(p, obs, stable)
        if folded is not None:
            return folded
        used = stable.node_used()
        shape = obs.shape
        limit = obs.node_limit.cpu_cores if obs.node_limit else math.inf
        if uneven(p, shape, used):
            shape = nearchus_optimizer.node_level(shape, used, p.e_thd_opt, p.min_node_cores, limit)
        shape = balanced_split(p, shape, used, stable, limit) or shape
        moved = nearchus_optimizer.cpu_moved(obs.shape, shape)
        ps_before = obs.shape.role_total(NodeRole.PS).cpu_cores
        ps_change = abs(shape.role_total(NodeRole.PS).cpu_cores - ps_before)
        if moved < min_step(p, obs) and ps_change <= p.ps_slack * ps_before:
            return None  # neither many cores nor much of the PS's share (nor any PS at all)
        return Plan(
            shape,
            Action.REBALANCE,
            f"balance PS and workers by their measured cost per step: move {moved:.3g} cpu",
            {"e_job": stable.e_job, "moved_cores": moved},
        )


@dataclass(frozen=True)
class GrowStarved:
    """Added after ``rebalance``: grow a job whose workers are saturated once the rebalance
    has nothing to move.

    Workers using at least ``E_thd_job`` of their CPU are not an MU bottleneck — they
    would use more — so the faithful answer (another worker sharing the same CPU) cannot
    help, and with the idle PS already down to what the rebalance leaves it, growing
    is the only move that can. NEARCHUS would grow such a job only at ``e_job ≥
    E_thd_job``, which an idle PS keeps it below: on a real small CNN here, started
    at 0.6 of its 2 CPUs with its PS at the 0.1-core floor using 0.013, the workers
    read 1.00 and ``e_job`` 0.85, and the job ran to the end at 0.6 CPU
    (benchmarks/run/runtime_rightsizing.py, docs/benchmarks.md).
    """

    params: NearchusPlusParams
    name: ClassVar[str] = "grow_starved"
    branch: ClassVar[Branch | None] = Branch.SCALE_OUT

    def propose(self, obs: Observation, stable: StableWindow) -> Proposal:
        _, e_wk = role_efficiencies(obs.shape, stable.node_used())
        if e_wk < self.params.e_thd_job:
            return None
        return grow(self.params, obs, stable, "workers saturated")


@dataclass(frozen=True)
class AddMeasuredWorkers:
    """Replaces ``add_worker``: enough workers for the workers' CPU at what one worker
    manages to use, if the workers leave more than ``1 − E_thd_opt`` of it idle (else it
    is not MU); what one worker used is noted as its MU cap (:attr:`PlusNotes.worker_mu`)."""

    params: NearchusPlusParams
    name: ClassVar[str] = "add_worker+"
    branch: ClassVar[Branch | None] = Branch.SCALE_OUT

    def propose(self, obs: Observation, stable: StableWindow) -> Proposal:
        p = self.params
        n = obs.shape.n_workers
        _, e_wk = role_efficiencies(obs.shape, stable.node_used())
        if e_wk >= p.e_thd_opt:
            return None
        per_worker = sum(stable.node_used()[w.name] for w in obs.shape.workers) / n
        wanted = obs.shape.role_total(NodeRole.WORKER).cpu_cores / per_worker if per_worker else n
        count = scale_out_count(p, n, wanted)
        shape = scaled_out(obs.shape, NodeRole.WORKER, count)
        if min(w.resources.cpu_cores for w in shape.workers) < p.min_node_cores:
            return None
        return Plan(
            shape,
            Action.ADD_WORKER,
            f"e_job {stable.e_job:.2f} < {p.e_thd_job}, no PSN: MU bottleneck; a "
            f"worker uses {per_worker:.3g} cpu, add {count} worker(s)",
            {"e_job": stable.e_job, **PlusNotes(worker_mu=per_worker).details()},
        )


def nearchus_plus_rules(p: NearchusPlusParams) -> tuple[Rule, ...]:
    """NEARCHUS's rules with nearchus+'s replacements and additions, by name."""
    rules = nearchus_rules(p)
    rules = replaced(rules, "stop", RevertToBest(p))
    rules = inserted(rules, Finished(p), before="stop+")
    rules = replaced(rules, "scale_up", ScaleUpInOneMove(p))
    rules = replaced(rules, "add_ps", AddPsForTheLink(p))
    rules = inserted(rules, GrowSaturated(p), after="add_ps+")
    rules = replaced(rules, "rebalance", BalancedRebalance(p))
    rules = inserted(rules, GrowStarved(p), after="rebalance+")
    return replaced(rules, "add_worker", AddMeasuredWorkers(p))


#: What nearchus+ asks, by name, about an evident imbalance before the metrics are stable
#: (each in order, the first proposal taken); idle workers get the whole engine.
EVIDENT_RULES: dict[Imbalance, tuple[str, ...] | None] = {
    Imbalance.PS_SATURATED: ("grow_saturated", "rebalance+"),
    Imbalance.PS_IDLE: ("rebalance+", "grow_starved"),
    Imbalance.WORKERS_IDLE: None,
}


class NearchusPlusPolicy(NearchusPolicy):
    """NEARCHUS's rules with nearchus+'s replacements and additions (see the module)."""

    name = "nearchus+"

    def __init__(self, params: NearchusPlusParams | None = None,
                 metric_interval_s: float = PAPER_METRIC_INTERVAL_S, **overrides: Any) -> None:  # fmt: skip
        super().__init__()
        params = with_overrides(NearchusPlusParams, params, overrides)
        self.params = on_clock(params, metric_interval_s)
        self.rules = nearchus_plus_rules(self.params)
        self._by_name = {rule.name: rule for rule in self.rules}

    def decision_due_s(self, observation: Observation) -> float:
        if finished(observation):
            return math.inf
        stable = self.stable(observation)
        if stable is not None and converged(self.params, observation, stable):
            return observation.time_s  # it will revert to the best shape, or keep this one
        if stable is None and self.evident(observation) is not None:
            return observation.time_s
        return super().decision_due_s(observation)

    def decide(self, observation: Observation) -> Plan | None:
        if self.stable(observation) is None:
            return self.decide_evident(observation)
        return super().decide(observation)

    def evident(self, obs: Observation) -> Evident | None:
        """The window's evident imbalance (only while the detector is not yet satisfied),
        read once per window (``Observation.readings``)."""
        if not self.params.act_on_evident or not obs.window or finished(obs):
            return None
        return obs.readings.of(("evident", self.params), lambda: self.read_evident(obs))

    def read_evident(self, obs: Observation) -> Evident | None:
        """:func:`evident_imbalance`, else for ranks alone :func:`saturated_ranks`."""
        found = evident_imbalance(obs.window, obs.shape, self.params)
        if found is None and self.params.grow_ranks_in_place:
            found = saturated_ranks(obs.window, obs.shape, self.params)
        return found

    def decide_evident(self, obs: Observation) -> Plan | None:
        """Before the metrics are stable: the rules :data:`EVIDENT_RULES` names for the
        imbalance, on the points that show it; saturated ranks grow in place."""
        found = self.evident(obs)
        if found is None:
            return None
        imbalance, window = found
        if converged(self.params, obs, window):
            return None  # the stop rule's verdict needs the stable speed
        if imbalance is Imbalance.RANKS_SATURATED:
            plan = grow(self.params, obs, window, "ranks saturated")
            in_place = plan is not None and plan.shape.n_workers == obs.shape.n_workers
            return plan if in_place else None  # a restart waits for N_comp points
        names = EVIDENT_RULES[imbalance]
        if names is None:
            return first_proposal(self.rules, obs, window, self.params.e_thd_job)
        # The imbalance chose these rules, not the engine's e_job test: each is asked.
        return first_proposal([self._by_name[n] for n in names], obs, window, None)
