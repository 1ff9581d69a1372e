"""DLRover Brain (Wang et al., §4): sample, optimize, adjust — per-node resources from measured use.

Stages, each remembered in the applied plan's ``details["stage"]``:

- **sample** (§4.2): launch ``sample_n_ps`` PS and one worker with the node
  maximum ``C_max`` and ``default_memory_bytes``. A worker killed for OOM is
  relaunched with double memory; a PS killed for OOM doubles the number of PS.
  Once the job has run ``min_observe_s`` (60 s) or ``min_observe_steps`` (100)
  steps (§4.3), read ``ŵ`` (the worker's used cores) and ``ŝ`` (all PS's used
  cores); if the PS use more than ``ps_cpu_threshold`` (0.9) of their CPU,
  give them more and sample again.
- **optimize** (§4.1, eq. 10-11, ``dlrover_math.optimize``): ``N_w`` workers
  of ``⌈ŵ⌉`` cores and ``N_ps`` PS of ``s = 16`` cores sharing the rest of
  ``C_total``. This reproduces DLRover's Table 2 from its Table 1 (tested).
  Once that runs, ``ŵ`` is measured again and the workers are grown to
  ``N_w = s_total / ŝ``.
- **adjust** (§4.2): a *hot PS* — above the PS CPU threshold and using more
  than ``hot_ps_ratio`` times the PS mean — is replaced by one with
  ``min(s_hot / s_used · ŝ · N_w, C_max)`` cores (a job that never sampled — launched
  from history or the job file's shape — estimates ``ŝ`` at its workers' full speed,
  ``Usage.ps_per_unhindered_worker``), as much of it as the budget has room for; PS
  saturated as a whole get
  more CPU; *idle PS CPU* (PS use below ``ps_idle_utilization``) means more
  workers, ``ΔN_w = min(s_total / ŝ', max_workers) − N_w``, where we read the
  paper's re-estimate as ``ŝ' = s_used / N_w`` (the PS cores one worker needs).

``C_total`` is the job's budget. DLRover lets extra low-priority workers
exceed it (§4.2); here every plan stays within the budget and what the cluster
has free. The paper's cap ``√K`` on the worker count is not defined in its
text; ``max_workers`` (none by default) stands for it. Initial plans come from
similar finished jobs when the mechanism has them (§4.3): the fastest one's
final shape, scaled into this budget, skips straight to *adjust*.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from rightsize.core.errors import SpecError
from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape, NodeRole
from rightsize.scaling import dlrover_math as dm
from rightsize.scaling.api import Action, EventKind, LaunchRequest, Observation, Plan, Policy
from rightsize.scaling.params import with_overrides
from rightsize.scaling.shapes import grows_within, growth_room, require_budget, rounding_room

GI = 2**30
SAMPLE, OPTIMIZE, ADJUST = "sample", "optimize", "adjust"


@dataclass(frozen=True)
class DLRoverParams:
    """DLRover's parameters; defaults are the paper's unless marked ours.

    Attributes:
        c_max_cores: ``C_max``, the most cores one node may have (32, §6.1); the
            mechanism's node limit lowers it where servers are smaller.
        sample_n_ps: PS nodes in the sampling stage (1, Table 1's sample rows).
        ps_cores: ``s``, cores per PS when optimizing (16, §4.1).
        ps_cpu_threshold: PS CPU utilization that means "more PS CPU" (0.9, §4.2).
        default_memory_bytes: ours — the "default memory" of a sampling node (4 GiB).
        min_observe_s: seconds of metrics before a decision (60, §4.3).
        min_observe_steps: ... or this many steps, whichever comes first (100, §4.3).
        hot_ps_ratio: ours — a PS using this many times the PS mean is hot.
        ps_idle_utilization: ours — PS use below this means idle PS CPU (§6.4 calls
            PS above 80% under-provisioned, so 0.8).
        ps_cpu_growth: ours — factor by which saturated PS CPU grows.
        memory_margin: ours — new workers get the observed worker memory times this.
        max_workers: the paper's undefined ``√K`` cap on workers (none).
        replace_hot_ps: §4.2 — a hot PS is *replaced* by a new PS with more CPU (its
            tensors move there, the hot one leaves; true). False: resize the hot PS in place,
            which a mechanism that changes quotas in place (this runtime) can do without
            moving a tensor (ours; measured beside it in benchmarks/run/runtime_elastic.py).
        core_step: the unit worker CPU is rounded up to (eq. 6's ``⌈ŵ⌉``: 1 core) ...
        core_step_fraction: ours — ... or this fraction of the budget where that is
            smaller (0.05). At the paper's and the simulator's budgets (30+ cores) it is
            the whole core; on a 2-CPU budget whole cores leave room for one worker and
            an idle PS (issue 17: 51% of the CPU idle to the end), so 0.1 core.
    """

    c_max_cores: float = 32.0
    sample_n_ps: int = 1
    ps_cores: float = 16.0
    ps_cpu_threshold: float = 0.9
    default_memory_bytes: int = 4 * GI
    min_observe_s: float = 60.0
    min_observe_steps: float = 100.0
    hot_ps_ratio: float = 1.5
    ps_idle_utilization: float = 0.8
    ps_cpu_growth: float = 2.0
    memory_margin: float = 1.2
    max_workers: int | None = None
    replace_hot_ps: bool = True
    core_step: float = 1.0
    core_step_fraction: float = 0.05

    def __post_init__(self) -> None:
        for name in ("c_max_cores", "ps_cores", "default_memory_bytes", "min_observe_s",
                     "core_step", "core_step_fraction"):  # fmt: skip
            if getattr(self, name) <= 0:
                raise SpecError(f"dlrover parameter {name}={getattr(self, name)!r} must be > 0")
        for name in ("ps_cpu_threshold", "ps_idle_utilization"):
            if not 0 < getattr(self, name) <= 1:
                raise SpecError(
                    f"dlrover parameter {name}={getattr(self, name)!r} must be in (0, 1]"
                )
        for name in ("hot_ps_ratio", "ps_cpu_growth", "memory_margin"):
            if getattr(self, name) < 1:
                raise SpecError(f"dlrover parameter {name}={getattr(self, name)!r} must be >= 1")
        if self.sample_n_ps < 1 or (self.max_workers is not None and self.max_workers < 1):
            raise SpecError("dlrover parameters sample_n_ps and max_workers must be >= 1")


class DLRoverPolicy(Policy):
    """DLRover Brain's sample → optimize → adjust (§4). Parameters: :class:`DLRoverParams`."""

    name = "dlrover"

    def __init__(self, params: DLRoverParams | None = None, **overrides: Any) -> None:
        self.params = with_overrides(DLRoverParams, params, overrides)

    def c_max(self, node_limit: Resources | None) -> float:
        """``C_max``, lowered to the largest node the mechanism can place."""
        limit = node_limit.cpu_cores if node_limit is not None else math.inf
        return min(self.params.c_max_cores, limit)

    def core_step(self, obs: Observation) -> float:
        """The unit of worker CPU for this job (see ``DLRoverParams.core_step``)."""
        p = self.params
        return min(p.core_step, p.core_step_fraction * obs.budget.cpu_cores)

    # -- launch -------------------------------------------------------------------------
    def sample_shape(self, budget: Resources, node_limit: Resources | None = None) -> ClusterShape:
        """``sample_n_ps`` PS and one worker of ``C_max`` cores each (less if the budget is small)."""
        p = self.params
        n_nodes = p.sample_n_ps + 1
        require_budget(self.name, budget, n_nodes * 0.5, "the sampling PS and worker, 0.5 cpu each")
        cores = min(self.c_max(node_limit), budget.cpu_cores / n_nodes)
        memory = p.default_memory_bytes
        if budget.memory_bytes:
            memory = min(memory, budget.memory_bytes // n_nodes)
        node = Resources(cores, memory)
        return ClusterShape.from_counts(p.sample_n_ps, 1, node, node)

    def initial_shape(self, budget: Resources, free: Resources) -> ClusterShape | None:
        shape = self.sample_shape(budget)
        return shape if shape.total().fits_within(free) else None

    def launch_plan(self, request: LaunchRequest) -> Plan | None:
        """From the fastest similar finished job if there is one (§4.3), else sampling."""
        if request.prior:
            best = max(request.prior, key=lambda r: r.steps_per_s)
            shape = dm.fit_into(best.shape, request.budget)
            stage, why = ADJUST, f"from a similar finished job at {best.steps_per_s:.3g} steps/s"
        else:
            shape = self.sample_shape(request.budget, request.node_limit)
            stage, why = SAMPLE, "sampling: a PS and one worker at C_max"
        if not shape.total().fits_within(request.free):
            return None
        return Plan(shape, Action.LAUNCH, f"dlrover: {why}", {"stage": stage})

    # -- decisions ----------------------------------------------------------------------
    def decision_due_s(self, observation: Observation) -> float:
        """Not before ``min_observe_s`` of metrics or ``min_observe_steps`` at the speed so far
        (now if a node was OOM-killed)."""
        obs, p = observation, self.params
        if obs.events or not obs.window:
            return obs.time_s
        wait = p.min_observe_s
        speed = obs.mean_speed()
        if speed > 0:
            wait = min(wait, p.min_observe_steps / speed)
        return max(obs.time_s, obs.window[0].time_s + wait)

    def decide(self, observation: Observation) -> Plan | None:
        obs, p = observation, self.params
        if obs.events and any(e.kind == EventKind.OOM_KILLED for e in obs.events):
            return self.relaunch_oom(obs)
        if not dm.observed_long_enough(obs.window, p.min_observe_s, p.min_observe_steps):
            return None
        usage = dm.Usage.of(obs)
        if not obs.shape.n_ps:
            return self.decide_ranks(obs, usage)
        stage = self.stage(obs)
        if stage == SAMPLE:
            return self.after_sampling(obs, usage)
        if stage == OPTIMIZE:
            grown = self.grow_to_ps_capacity(obs, usage)
            if grown is not None:
                return grown
        return self.adjust(obs, usage)

    def stage(self, obs: Observation) -> str:
        """The stage the last plan left the job in (inferred if the mechanism kept no plans)."""
        last = obs.last_plan
        if last is not None and "stage" in last.details:
            return str(last.details["stage"])
        return SAMPLE if obs.shape.n_workers == 1 and not obs.history else ADJUST

    def notes(self, obs: Observation, stage: str, **values: float) -> dict[str, float | str]:
        """The last plan's notes (``ŵ``, ``ŝ``) carried forward, updated, with the new stage."""
        notes = dict(obs.last_plan.details) if obs.last_plan else {}
        notes.update(values)
        notes["stage"] = stage
        return notes

    def relaunch_oom(self, obs: Observation) -> Plan | None:
        """§4.2: double a killed worker's memory, or the number of PS if a PS was killed."""
        killed = {e.node for e in obs.events if e.kind == EventKind.OOM_KILLED}
        roles = {n.role for n in obs.shape.nodes if n.name in killed}
        shape = obs.shape
        if NodeRole.WORKER in roles:
            shape = dm.with_worker_memory_doubled(shape, obs.node_limit)
        if NodeRole.PS in roles:
            shape = dm.with_ps_doubled(shape)
        if shape == obs.shape or not grows_within(obs, shape):
            return None  # nothing more to give now; wait for room
        return Plan(
            shape,
            Action.RELAUNCH_OOM,
            f"OOM on {', '.join(sorted(killed))}: double worker memory / number of PS",
            self.notes(obs, self.stage(obs)),
        )

    def decide_ranks(self, obs: Observation, usage: dm.Usage) -> Plan | None:
        """Allreduce ranks (no PS; ours, reading §4.1-4.2 without servers): sample ``ŵ``, a
        rank's CPU when its quota does not hold it back — a rank using more than
        ``ps_cpu_threshold`` of its quota gets ``ps_cpu_growth`` times more, up to ``C_max``
        and the budget — then eq. 10 with ``ŝ = 0``: ``N_w = C_total / ⌈ŵ⌉`` ranks of
        ``⌈ŵ⌉`` cores, once."""
        p = self.params
        if obs.last_plan is not None and obs.last_plan.details.get("stage") == OPTIMIZE:
            return None
        n, quota = obs.shape.n_workers, obs.shape.workers[0].resources.cpu_cores
        w_hat = usage.worker_used()
        c_max = self.c_max(obs.node_limit)
        if w_hat >= p.ps_cpu_threshold * quota:
            cores = min(quota * p.ps_cpu_growth, c_max, quota + obs.headroom.cpu_cores / n)
            if cores > quota + self.core_step(obs) / 2:
                shape = self._ranks(obs, n, cores)
                if grows_within(obs, shape):
                    return Plan(shape, Action.SCALE_UP, f"ranks use {w_hat:.3g} of {quota:g} "
                                f"cpu (> {p.ps_cpu_threshold:.0%}): sample w_hat at {cores:.3g}",
                                self.notes(obs, SAMPLE))  # fmt: skip
            w_hat = quota  # at the most it can have: ŵ is what it gets
        cores = min(dm.rounded_up(w_hat, self.core_step(obs)), c_max)
        c_total = min(obs.budget.cpu_cores, obs.shape.total().cpu_cores + obs.free.cpu_cores)
        count = obs.worker_range.clip(max(1, int(c_total // cores + 1e-9)))
        if p.max_workers is not None:
            count = min(count, p.max_workers)
        shape = self._ranks(obs, count, cores)
        if shape == obs.shape or not grows_within(obs, shape):
            return None
        return Plan(shape, Action.RESHAPE, f"sampled w_hat {w_hat:.3g} cpu: N_w = {c_total:g} / "
                    f"{cores:g} -> {count} ranks of {cores:g} cpu (eq. 10, no PS)",
                    self.notes(obs, OPTIMIZE, w_hat=w_hat))  # fmt: skip

    def _ranks(self, obs: Observation, n: int, cores: float) -> ClusterShape:
        memory = max(w.resources.memory_bytes for w in obs.shape.workers)
        node = Resources(cores, memory)
        return ClusterShape.from_counts(0, n, node, node)

    def after_sampling(self, obs: Observation, usage: dm.Usage) -> Plan | None:
        """More PS CPU if the PS were saturated, else eq. 10-11 from ``ŵ`` and ``ŝ``."""
        p = self.params
        if usage.ps_utilization() > p.ps_cpu_threshold:
            return self.more_ps_cpu(obs, SAMPLE, usage.ps_utilization())
        w_hat, s_hat = usage.worker_used(), usage.role_used(NodeRole.PS)
        c_total = min(obs.budget.cpu_cores, obs.shape.total().cpu_cores + obs.free.cpu_cores)
        plan = dm.optimize(c_total, w_hat, s_hat, p.ps_cores, self.core_step(obs))
        if plan is None:
            return None
        return Plan(
            self.optimized_shape(obs, usage, plan),
            Action.RESHAPE,
            f"sampled w_hat {w_hat:.3g}, s_hat {s_hat:.3g} cpu: {plan.n_workers} workers x "
            f"{plan.worker_cores:g} cpu, {plan.n_ps} PS sharing {plan.ps_total_cores:.3g} cpu "
            "(eq. 10-11)",
            self.notes(obs, OPTIMIZE, w_hat=w_hat, s_hat=s_hat),
        )

    def optimized_shape(
        self, obs: Observation, usage: dm.Usage, plan: dm.OptimizedPlan
    ) -> ClusterShape:
        c_max = self.c_max(obs.node_limit)
        ps_memory = obs.shape.role_total(NodeRole.PS).memory_bytes // plan.n_ps
        ps = Resources(min(plan.ps_total_cores / plan.n_ps, c_max), ps_memory)
        worker = Resources(min(plan.worker_cores, c_max), self.worker_memory(obs, usage))
        return ClusterShape.from_counts(plan.n_ps, plan.n_workers, ps, worker)

    def worker_memory(self, obs: Observation, usage: dm.Usage) -> int:
        """The observed worker memory with a margin (§4.2), or the current allocation."""
        observed = usage.worker_memory() * self.params.memory_margin
        current = max((n.resources.memory_bytes for n in obs.shape.workers), default=0)
        return int(observed) if observed > 0 else current

    def grow_to_ps_capacity(self, obs: Observation, usage: dm.Usage) -> Plan | None:
        """Second half of *optimize*: ``N_w = s_total / ŝ`` with ``ŵ`` measured again."""
        s_hat = float(obs.last_plan.details.get("s_hat", 0.0)) if obs.last_plan else 0.0
        if s_hat <= 0:
            return None
        s_total = obs.shape.role_total(NodeRole.PS).cpu_cores
        return self.add_workers(obs, usage, int(s_total // s_hat))

    def adjust(self, obs: Observation, usage: dm.Usage) -> Plan | None:
        """Hot PS, then saturated PS, then idle PS CPU; nothing else to fix: ``None``."""
        hot = self.replace_hot_ps(obs, usage)
        if hot is not None:
            return hot
        utilization = usage.ps_utilization()
        if utilization > self.params.ps_cpu_threshold:
            return self.more_ps_cpu(obs, ADJUST, utilization)
        s_used = usage.role_used(NodeRole.PS)
        if 0 < utilization < self.params.ps_idle_utilization:
            s_hat_now = s_used / obs.shape.n_workers
            ps_total = obs.shape.role_total(NodeRole.PS).cpu_cores
            return self.add_workers(obs, usage, int(ps_total // s_hat_now))
        return None

    def more_ps_cpu(self, obs: Observation, stage: str, utilization: float) -> Plan | None:
        """Every PS grown by ``ps_cpu_growth`` up to ``C_max``; all at ``C_max``: one more PS."""
        c_max = self.c_max(obs.node_limit)
        shape = obs.shape
        for node in shape.ps:
            cores = min(node.resources.cpu_cores * self.params.ps_cpu_growth, c_max)
            shape = shape.with_resources(node.name, replace(node.resources, cpu_cores=cores))
        if shape == obs.shape:
            shape = shape.with_node_added(NodeRole.PS, shape.ps[0].resources)
        if not grows_within(obs, shape):
            return None
        return Plan(
            shape,
            Action.RESHAPE,
            f"PS CPU at {utilization:.0%} > {self.params.ps_cpu_threshold:.0%}: more PS CPU",
            self.notes(obs, stage),
        )

    def add_workers(self, obs: Observation, usage: dm.Usage, target: int) -> Plan | None:
        """Workers of ``⌈ŵ⌉`` cores up to ``target`` (and ``max_workers``), as many as fit."""
        if self.params.max_workers is not None:
            target = min(target, self.params.max_workers)
        if target <= obs.shape.n_workers:
            return None  # the PS serve no more workers than the job has
        step, c_max = self.core_step(obs), self.c_max(obs.node_limit)
        if dm.no_room_for(obs, min(step, c_max)):
            return None  # not even a worker of one step fits (DLRover is asked every interval)
        cores = min(dm.rounded_up(usage.worker_used(), step), c_max)
        # (growth_room's CPU is the headroom's: checked first, without building the room)
        fits = int(obs.headroom.cpu_cores // Resources(cores).cpu_cores)
        if fits < 1:
            return None  # no room for one worker's CPU (often: asked every interval)
        room = growth_room(obs)
        worker = Resources(cores, self.worker_memory(obs, usage))
        if worker.memory_bytes:
            fits = min(fits, int(room.memory_bytes // worker.memory_bytes))
        count = min(target - obs.shape.n_workers, fits)
        if count < 1:
            return None
        shape = obs.shape
        for _ in range(count):
            shape = shape.with_node_added(NodeRole.WORKER, worker)
        return Plan(
            shape,
            Action.ADD_WORKER,
            f"the PS can serve {target} workers: add {count} of {cores} cpu",
            self.notes(obs, ADJUST),
        )

    def replace_hot_ps(self, obs: Observation, usage: dm.Usage) -> Plan | None:
        """§4.2: a PS far busier than the others gets ``min(s_hot/s_used·ŝ·N_w, C_max)`` cores."""
        p = self.params
        if obs.shape.n_ps < 2:
            return None
        used = {n.name: usage.cpu.get(n.name, 0.0) for n in obs.shape.ps}
        s_used = sum(used.values())
        hot = max(obs.shape.ps, key=lambda n: used[n.name])
        busy = used[hot.name] / hot.resources.cpu_cores if hot.resources.cpu_cores else 0.0
        if busy <= p.ps_cpu_threshold or used[hot.name] < p.hot_ps_ratio * s_used / obs.shape.n_ps:
            return None
        s_hat = float(obs.last_plan.details.get("s_hat", 0.0)) if obs.last_plan else 0.0
        s_hat = s_hat or usage.ps_per_unhindered_worker()  # no sampling stage measured it
        n_w = obs.shape.n_workers
        cores = dm.hot_ps_cores(used[hot.name], s_used, s_hat, n_w, self.c_max(obs.node_limit))
        # within the budget and what the cluster has free (ours): as much of it as fits
        cores = min(cores, hot.resources.cpu_cores + rounding_room(obs, 1).cpu_cores)
        bigger = replace(hot.resources, cpu_cores=cores)
        if p.replace_hot_ps:  # a new PS takes the hot one's tensors; the hot one leaves
            shape = obs.shape.with_node_added(NodeRole.PS, bigger).without_node(hot.name)
            new = shape.ps[-1].name
        else:
            shape, new = obs.shape.with_resources(hot.name, bigger), hot.name
        if cores <= hot.resources.cpu_cores or not grows_within(obs, shape):
            return None
        return Plan(
            shape,
            Action.REPLACE_PS,
            f"hot {hot.name} ({used[hot.name]:.3g} of {s_used:.3g} PS cpu): replace with "
            f"{new} of {cores:.3g} cpu",
            self.notes(obs, ADJUST),
        )
