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
check and stop rule, and changes eleven things:

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
  (:meth:`NearchusPlusPolicy.grow_starved`).
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
  (benchmarks/runtime_rightsizing.py, docs/benchmarks.md).
- **Fold an idle PS** into the others when the servers are idle beside busy workers
  and the busiest link would stay under ``fold_link_max`` (half its capacity) with
  one PS fewer; NEARCHUS only adds PS, so a job started with too many keeps paying
  for them (:meth:`NearchusPlusPolicy.fold_idle_ps`).
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
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from itertools import chain
from typing import Any

from rightsize.core.errors import SpecError
from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape, NodeRole, NodeSpec
from rightsize.scaling import nearchus_optimizer
from rightsize.scaling.api import Action, MetricSample, Observation, Plan, window_speed
from rightsize.scaling.nearchus import NearchusParams, NearchusPolicy, on_clock
from rightsize.scaling.nearchus_stability import StableWindow, stability_points
from rightsize.scaling.pace import PAPER_METRIC_INTERVAL_S
from rightsize.scaling.params import with_overrides
from rightsize.scaling.shapes import (
    MILLICORE,
    grows_within,
    redistributed,
    rounding_room,
    scaled_out,
)

FINAL = "final"
MAX_NODES_ROUNDING = 64  # leave rounding room for this many nodes when growing in one move


@dataclass(frozen=True)
class NearchusPlusParams(NearchusParams):
    """The faithful parameters plus nearchus+'s own (all ours).

    Attributes:
        ps_slack: CPU the balanced split gives the PS beyond its measured need (20%,
            which keeps ``e_ps`` just above ``E_thd_opt`` at the expected speed).
        max_scale_out: at most this many times the current PS or workers per move.
        node_spread: balance nodes within a component only if their efficiencies differ
            by more than this (0.1), so that measurement noise does not cost restarts.
        max_r_up: the largest growth ratio of one scale-up (8: up to 9x, in practice
            straight to the budget or what the cluster has free).
        act_on_evident: act on an evident PS imbalance before the metrics are stable
            (:func:`evident_imbalance`); False waits for the faithful detector.
        fold_idle_ps: remove a PS when the servers are idle and the links allow it
            (:meth:`NearchusPlusPolicy.fold_idle_ps`); False keeps every PS, as NEARCHUS.
        fold_link_max: fold only if the busiest link, carrying ``n/(n−1)`` times its
            traffic, stays under this fraction of its capacity (0.5): well below the PSN
            threshold, as the scale-up sizes the PS count for the link (folding a PS of
            such a job at 81% of its link slowed it, in the simulator).
        grow_ranks_in_place: a job of workers alone (allreduce ranks, a script's) grows
            each worker's CPU in place up to the node limit or the MU cap a worker showed
            (True), and adds workers only for an MU bottleneck; False caps each worker's
            growth at ``R_up`` (or ``mu_free_cores``) and adds the rest as workers, as for a
            PS job. In place costs no restart; another rank costs one, and on a script's
            compute-bound ranks here one rank of 2 CPU trained 1.2-1.5x faster than two of 1
            (benchmarks/torchrun_rightsizing.py).
        in_place_points: with ``grow_ranks_in_place``, ranks that used at least
            ``E_thd_job`` of their CPU in this many stability points in a row (2) grow in
            place at once. §IV's ``N_comp`` (5) guards moves that restart the job; a move
            that restarts nothing is undone as cheaply, and the three points between, at
            the runtime's 2 s each, are 6 s at the too-small size: a tenth of a one-minute
            script (benchmarks/torchrun_rightsizing.py).
        mu_free_cores: a worker's CPU may grow to at least this (1 core) in one move,
            whatever ``R_up`` allows: the MU bottleneck sets in at 16-37 vCPUs in the
            paper (§III), never below a core, and a small CNN's workers at 0.25 CPU grown
            by ``R_up`` became five workers at 0.37 that trained at 0.71 of the two at 0.8
            of the measured sweep (benchmarks/runtime_rightsizing.py).
    """

    ps_slack: float = 0.2
    max_scale_out: float = 2.0
    node_spread: float = 0.1
    max_r_up: float = 8.0
    act_on_evident: bool = True
    fold_idle_ps: bool = True
    fold_link_max: float = 0.5
    mu_free_cores: float = 1.0
    grow_ranks_in_place: bool = True
    in_place_points: int = 2

    def __post_init__(self) -> None:
        super().__post_init__()
        if (self.ps_slack < 0 or self.max_scale_out < 1 or self.max_r_up < self.r_up
                or not 0 < self.fold_link_max <= 1 or self.mu_free_cores < 0
                or self.in_place_points < 1):  # fmt: skip
            raise SpecError(
                f"nearchus+ parameters: ps_slack={self.ps_slack} must be >= 0, "
                f"max_scale_out={self.max_scale_out} >= 1, max_r_up={self.max_r_up} >= r_up, "
                f"fold_link_max={self.fold_link_max} in (0, 1], "
                f"mu_free_cores={self.mu_free_cores} >= 0 "
                f"and in_place_points={self.in_place_points} >= 1"
            )


def balanced_ps_cores(
    total_cores: float, ps_core_s_per_step: float, wk_core_s_per_step: float, slack: float
) -> float:
    """PS cores so that PS and workers sustain the same speed out of ``total_cores``.

    With workers taking ``c_wk`` core-seconds and the PS ``c_ps`` per step, the
    workers' ``A − a`` cores run ``(A − a) / c_wk`` steps/s, which the PS needs
    ``c_ps·(1 + slack)`` core-seconds for: ``a = A·k / (1 + k)``, ``k = c_ps·(1+slack)/c_wk``.
    """
    k = ps_core_s_per_step * (1 + slack) / wk_core_s_per_step
    return total_cores * k / (1 + k)


def role_efficiencies(shape: ClusterShape, used: dict[str, float]) -> tuple[float, float]:
    """``(e_ps, e_wk)``: each role's ``Σu_i / Σa_i`` with the cores ``used`` per node."""
    return (nearchus_optimizer.efficiency(shape.ps, used),
            nearchus_optimizer.efficiency(shape.workers, used))  # fmt: skip


def costs_per_step(
    shape: ClusterShape, used: dict[str, float], speed: float
) -> tuple[float, float]:
    """``(c_ps, c_wk)``: the core-seconds each role uses per step at ``speed`` (> 0)."""
    return (sum(used[n.name] for n in shape.ps) / speed,
            sum(used[n.name] for n in shape.workers) / speed)  # fmt: skip


class Imbalance(Enum):
    """What every point of a window shows about its PS (see :func:`evident_imbalance`)."""

    PS_SATURATED = "PS saturated"
    PS_IDLE = "PS idle"
    WORKERS_IDLE = "workers idle"
    RANKS_SATURATED = "ranks saturated"  # a job without PS: grow in place (saturated_ranks)


#: An evident imbalance and the points that show it, summarized.
Evident = tuple[Imbalance, StableWindow]


def evident_imbalance(
    window: Sequence[MetricSample], shape: ClusterShape, params: NearchusPlusParams
) -> Evident | None:
    """The PS imbalance that each of the window's last ``N_comp`` stability points shows,
    with those points summarized, or None.

    Each point must train (speed > 0) and read the same side of the thresholds: the PS
    at least ``E_thd_job`` busy (PSC), or the PS below ``E_thd_opt`` while the workers
    are at least ``E_thd_opt`` busy, or the workers below ``E_thd_opt`` (with the PS not
    saturated: ``e_job`` is then evidently below ``E_thd_job``, and the faithful engine's
    PSN check and MU rule answer it). Five readings in a row on one side are not noise,
    whatever the speed's CV: the faithful detector's 5% CV guards decisions that weigh
    small differences (``e_job`` against 0.95, one speed against another), not these.
    """
    found = last_readings(window, shape, params.stability_period_s, params.n_comp)
    if found is None:
        return None
    summary, readings = found
    seen: set[Imbalance] = set()
    for e_ps, e_wk in readings:
        if e_ps >= params.e_thd_job:
            seen.add(Imbalance.PS_SATURATED)
        elif e_ps < params.e_thd_opt <= e_wk:
            seen.add(Imbalance.PS_IDLE)
        elif e_wk < params.e_thd_opt:
            seen.add(Imbalance.WORKERS_IDLE)
        else:
            return None
    if len(seen) != 1:
        return None
    return seen.pop(), summary


def last_readings(
    window: Sequence[MetricSample], shape: ClusterShape, period_s: float, count: int
) -> tuple[StableWindow, list[tuple[float, float]]] | None:
    """The window's last ``count`` stability points summarized, and each one's ``(e_ps,
    e_wk)``; None if there are fewer, or one did not train (speed 0) or came from another
    shape."""
    points = stability_points(window, period_s)[-count:]
    if len(points) < count:
        return None
    readings = []
    for point in points:
        if window_speed(point) <= 0:
            return None
        used = StableWindow.of(point).used
        if not all(n.name in used for n in shape.nodes):
            return None  # a point from another shape
        readings.append(role_efficiencies(shape, used))
    return StableWindow.of(tuple(chain.from_iterable(points))), readings


def saturated_ranks(
    window: Sequence[MetricSample], shape: ClusterShape, params: NearchusPlusParams
) -> Evident | None:
    """A job of workers alone whose workers used at least ``E_thd_job`` of their CPU in each
    of the window's last ``in_place_points`` stability points, those points summarized;
    else None."""
    found = None if shape.n_ps else last_readings(window, shape, params.stability_period_s,
                                                      params.in_place_points)  # fmt: skip
    if found is None or any(e_wk < params.e_thd_job for _, e_wk in found[1]):
        return None
    return Imbalance.RANKS_SATURATED, found[0]


def max_link_utilization(window: Sequence[MetricSample]) -> float:
    """The busiest PS link's mean utilization over ``window`` (0 if unknown)."""
    means = []
    names = {
        name
        for s in window
        for name, role in zip(s.columns.names, s.columns.roles, strict=True)
        if role == NodeRole.PS
    }
    for name in names:
        utils = [u for s in window if (u := s.columns.net_utilization_of(name)) is not None]
        if utils:
            means.append(sum(utils) / len(utils))
    return max(means, default=0.0)


def with_role_total(shape: ClusterShape, role: NodeRole, cores: float) -> ClusterShape:
    """``shape`` with ``role``'s CPU set to ``cores``, split in proportion to what each holds."""
    members = shape.role(role)
    held = sum(n.resources.cpu_cores for n in members)
    nodes = []
    for node in shape.nodes:
        if node.role == role:
            share = node.resources.cpu_cores / held if held else 1 / len(members)
            res = node.resources
            node = NodeSpec(
                node.name, node.role, Resources(cores * share, res.memory_bytes, res.gpus)
            )
        nodes.append(node)
    return ClusterShape(tuple(nodes))


class NearchusPlusPolicy(NearchusPolicy):
    """NEARCHUS with a balanced PS/worker split, measured scale-out and revert-to-best."""

    name = "nearchus+"

    def __init__(self, params: NearchusPlusParams | None = None,
                 metric_interval_s: float = PAPER_METRIC_INTERVAL_S, **overrides: Any) -> None:  # fmt: skip
        super().__init__()
        params = with_overrides(NearchusPlusParams, params, overrides)
        self.params = on_clock(params, metric_interval_s)

    def finished(self, observation: Observation) -> bool:
        last = observation.last_plan
        return last is not None and bool(last.details.get(FINAL))

    def decision_due_s(self, observation: Observation) -> float:
        if self.finished(observation):
            return math.inf
        stable = self.stable(observation)
        if stable is not None and self.converged(observation, stable):
            return observation.time_s  # it will revert to the best shape, or keep this one
        if stable is None and self.evident(observation) is not None:
            return observation.time_s
        return super().decision_due_s(observation)

    def decide(self, observation: Observation) -> Plan | None:
        if self.stable(observation) is None:
            return self.decide_evident(observation)
        return super().decide(observation)

    def evident(self, obs: Observation) -> Evident | None:
        """The window's evident imbalance (only while the detector is not yet satisfied)."""
        if not self.params.act_on_evident or not obs.window or self.finished(obs):
            return None
        return obs.readings.of(("evident", self.params), lambda: self.read_evident(obs))

    def read_evident(self, obs: Observation) -> Evident | None:
        """:func:`evident_imbalance`, else for ranks alone :func:`saturated_ranks`."""
        found = evident_imbalance(obs.window, obs.shape, self.params)
        if found is None and self.params.grow_ranks_in_place:
            found = saturated_ranks(obs.window, obs.shape, self.params)
        return found

    def decide_evident(self, obs: Observation) -> Plan | None:
        """Grow a job whose PS is saturated (else give the PS its balanced share), give an
        idle PS's CPU to the workers (else grow saturated workers), or run the faithful
        engine on idle workers — before the metrics are stable."""
        found = self.evident(obs)
        if found is None:
            return None
        imbalance, window = found
        if self.converged(obs, window):
            return None  # the stop rule's verdict needs the stable speed
        if imbalance is Imbalance.RANKS_SATURATED:
            plan = self.grow(obs, window, "ranks saturated")
            in_place = plan is not None and plan.shape.n_workers == obs.shape.n_workers
            return plan if in_place else None  # a restart waits for N_comp points
        if imbalance is Imbalance.PS_SATURATED:
            return self.grow_saturated(obs, window) or self.rebalance(obs, window)
        if imbalance is Imbalance.PS_IDLE:
            return self.rebalance(obs, window) or self.grow_starved(obs, window)
        return self.decide_stable(obs, window)

    def decide_stable(self, observation: Observation, stable: StableWindow) -> Plan | None:
        if self.finished(observation):
            return None
        if self.converged(observation, stable):
            return self.revert_to_best(observation, stable)
        return super().decide_stable(observation, stable)

    def without_psn(self, obs: Observation, stable: StableWindow) -> Plan | None:
        """A saturated PS or busy job grows (ours); else the faithful rebalance; else
        saturated workers grow (ours); else the faithful MU bottleneck."""
        return (self.grow_saturated(obs, stable) or self.rebalance(obs, stable)
                or self.grow_starved(obs, stable) or self.add_worker(obs, stable))  # fmt: skip

    def grow_saturated(self, obs: Observation, stable: StableWindow) -> Plan | None:
        """Grow a job whose PS is saturated, or whose PS and workers are both busy.

        A saturated PS (``e_ps ≥ E_thd_job``: PSC) or both components at least
        ``E_thd_opt`` busy means ``e_job`` is below ``E_thd_job`` because nodes wait on
        each other, not because the job cannot use more CPU (no component is idle, which
        the rebalance would fix), so it grows (:meth:`grow`). (In the simulator a job whose
        components are both this busy reads ``e_job ≥ E_thd_job``, so this rule changes
        nothing simulated.)
        """
        p = self.params
        e_ps, e_wk = role_efficiencies(obs.shape, stable.node_used())
        saturated_ps = e_ps >= p.e_thd_job
        if not (saturated_ps or min(e_ps, e_wk) >= p.e_thd_opt):
            return None
        return self.grow(obs, stable, "PS saturated" if saturated_ps else "PS and workers busy")

    def grow_starved(self, obs: Observation, stable: StableWindow) -> Plan | None:
        """Grow a job whose workers are saturated once the rebalance has nothing to move.

        Workers using at least ``E_thd_job`` of their CPU are not an MU bottleneck — they
        would use more — so the faithful answer (another worker sharing the same CPU) cannot
        help, and with the idle PS already down to what the rebalance leaves it, growing
        is the only move that can. NEARCHUS would grow such a job only at ``e_job ≥
        E_thd_job``, which an idle PS keeps it below: on a real small CNN here, started
        at 0.6 of its 2 CPUs with its PS at the 0.1-core floor using 0.013, the workers
        read 1.00 and ``e_job`` 0.85, and the job ran to the end at 0.6 CPU
        (benchmarks/runtime_rightsizing.py, docs/benchmarks.md).
        """
        _, e_wk = role_efficiencies(obs.shape, stable.node_used())
        if e_wk < self.params.e_thd_job:
            return None
        return self.grow(obs, stable, "workers saturated")

    def grow(self, obs: Observation, stable: StableWindow, busy: str) -> Plan | None:
        """Grow the job to what the budget and the cluster allow (up to ``max_r_up``), the
        PS share from the measured cost per step (:func:`balanced_ps_cores`), each node
        keeping its memory and new workers a worker's memory; ``busy`` says why."""
        p, shape = self.params, obs.shape
        if stable.speed <= 0:
            return None
        used = stable.node_used()
        e_ps, e_wk = role_efficiencies(shape, used)
        total = shape.total().cpu_cores
        extra = min(self.growth_cores(obs), total * p.max_r_up)
        c_ps, c_wk = costs_per_step(shape, used, stable.speed)
        if extra < max(self.min_step(obs), 1e-3) or c_wk <= 0:
            return None
        grown_total = total + extra
        ps_cores = balanced_ps_cores(grown_total, c_ps, c_wk, p.ps_slack)
        ps_cores = max(ps_cores, p.min_node_cores * shape.n_ps)
        grown = self.grown_split(obs, extra / total, ps_cores, grown_total - ps_cores)
        if not grows_within(obs, grown):
            return None
        return Plan(
            grown,
            Action.SCALE_UP,
            f"{busy} (e_ps {e_ps:.2f}, e_wk {e_wk:.2f}; e_job {stable.e_job:.2f}): "
            f"grow by {extra:.3g} cpu to {grown.describe()}, PS and workers by cost per step",
            {"e_job": stable.e_job, "factor": extra / total, **self.known_mu(obs)},
        )

    def growth_cores(self, obs: Observation) -> float:
        """The CPU the job may grow by in one move: its headroom less a millicore for each
        of up to ``MAX_NODES_ROUNDING`` nodes (how many it will have is not known yet), or
        for a job of ranks alone that grows in place, up to the same whole number of
        millicores for every rank. (A rank grown to 1.936 of 2 CPU runs one torch thread,
        ``floor`` of its share: on real scripts here it used one core of them, and the MU
        rule then read a bottleneck and split it into two ranks of one core, a shape slower
        than one rank of two.)"""
        shape, p = obs.shape, self.params
        if shape.n_ps or not p.grow_ranks_in_place:
            return rounding_room(obs, MAX_NODES_ROUNDING).cpu_cores
        reachable = shape.total().cpu_cores + obs.headroom.cpu_cores
        each = math.floor(reachable / shape.n_workers / MILLICORE + 1e-9) * MILLICORE
        return max(0.0, each * shape.n_workers - shape.total().cpu_cores)

    def grown_split(
        self, obs: Observation, factor: float, ps_cores: float, wk_cores: float
    ) -> ClusterShape:
        """``obs.shape`` grown by ``factor`` with ``ps_cores`` and ``wk_cores`` for the
        roles; node counts as :meth:`grown` picks them, memory per node kept."""
        shape = obs.shape
        n_ps, n_wk = self.grown_counts(obs, factor, ps_cores, wk_cores)
        wk_memory = shape.role_total(NodeRole.WORKER).memory_bytes // shape.n_workers
        grown = scaled_out(shape, NodeRole.PS, n_ps - shape.n_ps)
        grown = scaled_out(grown, NodeRole.WORKER, n_wk - shape.n_workers)
        if shape.n_ps:  # (a job of workers alone has no PS to size)
            ps_memory = shape.role_total(NodeRole.PS).memory_bytes // shape.n_ps
            grown = redistributed(grown, NodeRole.PS, Resources(ps_cores, ps_memory * n_ps))
        return redistributed(grown, NodeRole.WORKER, Resources(wk_cores, wk_memory * n_wk))

    def scale_up(self, obs: Observation, stable: StableWindow) -> Plan | None:
        """Grow to what the budget and the cluster allow in one move, out as well as up.

        Per-worker CPU grows by at most ``R_up`` (and never past the MU cap a
        worker showed before), so the extra CPU arrives as more workers; the PS
        count grows so that the busiest PS link, scaled by the growth, stays
        under the PSN threshold.
        """
        p = self.params
        total = obs.shape.total()
        room = rounding_room(obs, MAX_NODES_ROUNDING)
        factor = min(p.max_r_up, self.growth_cores(obs) / total.cpu_cores if total.cpu_cores else 0.0)
        if total.memory_bytes:
            factor = min(factor, room.memory_bytes / total.memory_bytes)
        if total.cpu_cores * factor < max(self.min_step(obs), 1e-3):
            return None
        shape = self.grown(obs, factor)
        return Plan(
            shape,
            Action.SCALE_UP,
            f"e_job {stable.e_job:.2f} >= {p.e_thd_job}: scale up by {factor:.0%} to "
            f"{shape.describe()}",
            {"e_job": stable.e_job, "factor": factor, **self.known_mu(obs)},
        )

    def grown(self, obs: Observation, factor: float) -> ClusterShape:
        shape = obs.shape
        ps_total = shape.role_total(NodeRole.PS).scaled(1 + factor)
        wk_total = shape.role_total(NodeRole.WORKER).scaled(1 + factor)
        n_ps, n_wk = self.grown_counts(obs, factor, ps_total.cpu_cores, wk_total.cpu_cores)
        grown = scaled_out(shape, NodeRole.PS, n_ps - shape.n_ps)
        grown = scaled_out(grown, NodeRole.WORKER, n_wk - shape.n_workers)
        grown = redistributed(grown, NodeRole.PS, ps_total)
        return redistributed(grown, NodeRole.WORKER, wk_total)

    def grown_counts(
        self, obs: Observation, factor: float, ps_cores: float, wk_cores: float
    ) -> tuple[int, int]:
        """PS and workers for a job grown by ``factor`` to ``ps_cores`` and ``wk_cores``.

        Each worker's CPU grows by at most ``R_up`` (and never past a measured MU cap),
        the rest arriving as more workers; the PS count grows so that the busiest PS
        link, scaled by the growth, stays under the PSN threshold.
        """
        p, shape = self.params, obs.shape
        per_worker = max(w.resources.cpu_cores for w in shape.workers) * (1 + p.r_up)
        per_worker = max(per_worker, p.mu_free_cores)
        if shape.n_ps == 0 and p.grow_ranks_in_place:
            per_worker = math.inf  # up to the node limit or a measured MU cap: no restart
        per_worker = min(per_worker, self.known_mu(obs).get("worker_mu", per_worker))
        if obs.node_limit is not None:
            per_worker = min(per_worker, obs.node_limit.cpu_cores)
        n_wk = max(shape.n_workers, math.ceil(wk_cores / per_worker - 1e-9))
        link = max_link_utilization(obs.window[-p.n_net :])
        n_ps = max(shape.n_ps, math.ceil(shape.n_ps * link * (1 + factor) / p.psn_link_utilization))
        if obs.node_limit is not None:
            n_ps = max(n_ps, math.ceil(ps_cores / obs.node_limit.cpu_cores - 1e-9))
        return n_ps, n_wk

    def known_mu(self, obs: Observation) -> dict[str, float]:
        """The MU cap a worker showed earlier in this job, if any (kept in plan details)."""
        for plan in reversed(obs.plans):
            if "worker_mu" in plan.details:
                return {"worker_mu": float(plan.details["worker_mu"])}
        return {}

    def revert_to_best(self, obs: Observation, stable: StableWindow) -> Plan | None:
        """Go back to the fastest shape run so far if it beat the current one."""
        best = max(obs.history, key=lambda r: r.steps_per_s)
        better = best.steps_per_s > stable.speed * (1 + self.params.min_gain)
        if not better or not best.shape.total().fits_within(obs.shape.total() + obs.free):
            return Plan(obs.shape, Action.RESHAPE, "no improvement left: keep", {FINAL: 1.0})
        return Plan(
            best.shape,
            Action.RESHAPE,
            f"no improvement left: back to the fastest shape ({best.steps_per_s:.3g} steps/s "
            f"> {stable.speed:.3g})",
            {FINAL: 1.0},
        )

    def rebalance(self, obs: Observation, stable: StableWindow) -> Plan | None:
        """An idle PS folded into the others, else node-level balancing (faithful), then the
        balanced PS/worker split."""
        folded = self.fold_idle_ps(obs, stable)
        if folded is not None:
            return folded
        p = self.params
        used = stable.node_used()
        shape = obs.shape
        limit = obs.node_limit.cpu_cores if obs.node_limit else math.inf
        if self.uneven(shape, used):
            shape = nearchus_optimizer.node_level(shape, used, p.e_thd_opt, p.min_node_cores, limit)
        shape = self.balanced_split(shape, used, stable, limit) or shape
        moved = nearchus_optimizer.cpu_moved(obs.shape, shape)
        ps_before = obs.shape.role_total(NodeRole.PS).cpu_cores
        ps_change = abs(shape.role_total(NodeRole.PS).cpu_cores - ps_before)
        if moved < self.min_step(obs) and ps_change <= p.ps_slack * ps_before:
            return None  # neither many cores nor much of the PS's share (nor any PS at all)
        return Plan(
            shape,
            Action.REBALANCE,
            f"balance PS and workers by their measured cost per step: move {moved:.3g} cpu",
            {"e_job": stable.e_job, "moved_cores": moved},
        )

    def fold_idle_ps(self, obs: Observation, stable: StableWindow) -> Plan | None:
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
        p, shape = self.params, obs.shape
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

    def uneven(self, shape: ClusterShape, used: dict[str, float]) -> bool:
        """True if some component's node efficiencies differ by more than ``node_spread``."""
        for role in NodeRole:
            effs = [used[n.name] / n.resources.cpu_cores for n in shape.role(role)]
            if len(effs) > 1 and max(effs) - min(effs) > self.params.node_spread:
                return True
        return False

    def balanced_split(
        self, shape: ClusterShape, used: dict[str, float], stable: StableWindow, limit: float
    ) -> ClusterShape | None:
        p = self.params
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

    def add_worker(self, obs: Observation, stable: StableWindow) -> Plan | None:
        """Enough workers for the workers' CPU at what one worker manages to use, if the
        workers leave more than ``1 − E_thd_opt`` of it idle (else it is not MU)."""
        n = obs.shape.n_workers
        _, e_wk = role_efficiencies(obs.shape, stable.node_used())
        if e_wk >= self.params.e_thd_opt:
            return None
        per_worker = sum(stable.node_used()[w.name] for w in obs.shape.workers) / n
        wanted = obs.shape.role_total(NodeRole.WORKER).cpu_cores / per_worker if per_worker else n
        count = self.scale_out_count(n, wanted)
        shape = scaled_out(obs.shape, NodeRole.WORKER, count)
        if min(w.resources.cpu_cores for w in shape.workers) < self.params.min_node_cores:
            return None
        return Plan(
            shape,
            Action.ADD_WORKER,
            f"e_job {stable.e_job:.2f} < {self.params.e_thd_job}, no PSN: MU bottleneck; a "
            f"worker uses {per_worker:.3g} cpu, add {count} worker(s)",
            {"e_job": stable.e_job, "worker_mu": per_worker},
        )

    def add_ps(self, obs: Observation, stable: StableWindow, ps: str) -> Plan:
        """Enough PS for the busiest link to fall to the PSN threshold."""
        busiest = max_link_utilization(obs.window[-self.params.n_net :]) or 1.0
        n = obs.shape.n_ps
        count = self.scale_out_count(n, n * busiest / self.params.psn_link_utilization)
        return Plan(
            scaled_out(obs.shape, NodeRole.PS, count),
            Action.ADD_PS,
            f"e_job {stable.e_job:.2f} < {self.params.e_thd_job} and PSN bottleneck on {ps} "
            f"(links up to {busiest:.0%}): add {count} PS",
            {"e_job": stable.e_job, "hot_ps": ps},
        )

    def scale_out_count(self, current: int, wanted: float) -> int:
        """Nodes to add: ``⌈wanted⌉ − current``, at least 1, at most ``max_scale_out``x."""
        limit = max(1, int(current * (self.params.max_scale_out - 1)))
        return min(max(1, math.ceil(wanted - 1e-9) - current), limit)
