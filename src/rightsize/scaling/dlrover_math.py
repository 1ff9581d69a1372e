"""DLRover's formulas (§4.1-§4.2) and the measurements they take, as pure functions.

- eq. 10-11: from the sampled ``ŵ`` (cores one worker uses) and ``ŝ`` (cores
  all PS use with that one worker), ``N_w = ⌊C_total / (ŵ + ŝ)⌋`` workers of
  ``w = ⌈ŵ⌉`` cores, ``s_total = C_total − N_w·w`` and ``N_ps = ⌊s_total / s⌋``;
- the hot-PS replacement ``s = min(s_hot / s_total · ŝ · N_w, C_max)``;
- §4.3's "after more than 100 global steps or after 60 s".
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING

from rightsize.core.resources import CPU_DECIMALS, Resources
from rightsize.core.shape import ClusterShape, NodeRole
from rightsize.scaling.api import MetricSample, Observation
from rightsize.scaling.shapes import DERIVED_SHAPES

#: The least CPU eq. 11 may leave the PS: a millicore, the finest CPU a cgroup quota
#: holds. Less is no CPU at all — or a float's rounding residue (7.219 − 10 × 0.7219 is
#: 8.9e-16, not 0, which the check ``> 0`` once let through as a PS's share).
MIN_PS_TOTAL_CORES = 1e-3


@dataclass(frozen=True)
class OptimizedPlan:
    """The result of DLRover's eq. 10-11."""

    n_workers: int
    worker_cores: float
    n_ps: int
    ps_total_cores: float


def optimize(c_total: float, w_hat: float, s_hat: float, ps_cores: float,
             core_step: float = 1.0) -> OptimizedPlan | None:  # fmt: skip
    """DLRover eq. 10-11 for ``C_total`` cores; ``None`` if not even one worker fits.

    Workers get whole cores (eq. 6) — whole ``core_step`` s, which is 1 core in the
    paper. Rounding ``ŵ`` up can leave no CPU for the PS; then ``N_w`` shrinks until
    some is left. (The paper's own Table 2 keeps 24 W&D workers although ``24·ŝ``
    exceeds its ``s_total``, so eq. 4 is not enforced beyond that.)
    """
    if w_hat + s_hat <= 0:
        return None
    worker_cores = rounded_up(w_hat, core_step)
    n_workers = int(c_total // (w_hat + s_hat))
    while n_workers > 0 and c_total - n_workers * worker_cores < MIN_PS_TOTAL_CORES:
        n_workers -= 1
    if n_workers < 1:
        return None
    s_total = c_total - n_workers * worker_cores
    return OptimizedPlan(n_workers, worker_cores, max(1, int(s_total // ps_cores)), s_total)


def rounded_up(cores: float, step: float) -> float:
    """``cores`` rounded up to whole ``step`` s (at least one step): eq. 6's ``⌈ŵ⌉``."""
    steps = max(1, math.ceil(cores / step - 1e-9))
    value = round(steps * step, 6)
    return int(value) if value.is_integer() else value  # whole cores stay whole numbers


def no_room_for(obs: Observation, cores: float) -> bool:
    """Whether the job's headroom CPU is surely below ``cores`` (and below every worker of at
    least ``cores`` rounded as :func:`rounded_up` and ``Resources`` round), read from the
    budget, the shape's total and the free CPU without making ``obs.headroom``: that rounds
    to millicores, so a margin of two keeps the answer exact. A job without room for one
    more worker is the usual case of a decision, made every interval."""
    budget_left = max(0.0, obs.budget.cpu_cores - obs.shape.total().cpu_cores)
    return min(budget_left, obs.free.cpu_cores) < cores - 2 * 10**-CPU_DECIMALS


def hot_ps_cores(s_hot: float, s_used: float, s_hat: float, n_workers: int, c_max: float) -> float:
    """DLRover §4.2: cores for the PS replacing a hot one, ``min(s_hot/s_total·ŝ·N_w, C_max)``.

    ``s_used`` is what all PS use now (the paper's ``s_total`` in this formula).
    """
    return min(s_hot / s_used * s_hat * n_workers, c_max) if s_used > 0 else c_max


def observed_long_enough(
    window: Sequence[MetricSample], min_seconds: float, min_steps: float
) -> bool:
    """§4.3: the job has run more than ``min_steps`` steps or ``min_seconds`` seconds."""
    if len(window) < 2:
        return False
    interval = window[1].time_s - window[0].time_s
    if window[-1].time_s - window[0].time_s + interval >= min_seconds:
        return True  # (the steps are summed only when the time alone is not enough)
    return sum(s.steps_per_s for s in window) * interval >= min_steps


@dataclass(frozen=True)
class Usage:
    """Mean CPU and memory each node used over an observation's window, while the job trained.

    Attributes:
        samples: the samples averaged (see :meth:`of`).
        shape: the job's shape.
    """

    samples: Sequence[MetricSample]
    shape: ClusterShape

    @classmethod
    def of(cls, obs: Observation) -> Usage:
        """The means over the window's samples in which the job took training steps (all of
        them if it took none). §4.2 reads ``ŵ`` and ``ŝ`` "after the job starts to run": a
        sample of nodes still starting — a server loading its tensors, a worker importing
        torch on CPU borrowed while it starts (``runtime.startup_allowance``) — is not what
        they use to train. Averaged in, a launch's samples hid a hot PS that used all of its
        quota once training began (0.895 of it over the window, under the 0.9 threshold)."""
        return cls([s for s in obs.window if s.steps_per_s > 0] or obs.window, obs.shape)

    # Derived once, when the usage is made (a decision reads the CPU several times); the
    # memory only when read (it sizes new workers, which few decisions do). The loops read
    # the samples' node columns: no NodeMetrics made per node and sample.
    if TYPE_CHECKING:
        cpu: dict[str, float]  # each node's mean CPU cores used (added in sample order)
        _role_used: dict[NodeRole, float]

    def __post_init__(self) -> None:
        # (plain zips below: columns hold one value per node, and ``strict=`` costs a third
        # of these loops on Python 3.11)
        samples, shape = self.samples, self.shape
        count = len(samples) or 1
        names = shape.names
        if samples and all(sample.nodes.names == names for sample in samples):
            # every sample has the shape's nodes (a window belongs to one shape): each node's
            # readings summed in one pass down its column, and the roles' totals in node order
            # (the same additions, in the same order, as the general loop and ``sum`` below)
            cpu = {}
            role_used: dict[NodeRole, float] = {NodeRole.PS: 0, NodeRole.WORKER: 0}  # sum's start
            columns = zip(*[sample.nodes.cpu_used_cores for sample in samples])  # noqa: B905
            for node, readings in zip(shape.nodes, columns):  # noqa: B905 (a column per node)
                mean = 0.0
                for used in readings:
                    mean += used / count
                cpu[node.name] = mean
                role_used[node.role] += mean
        else:  # nodes that came or went inside the window (the runtime's samples can)
            cpu = {}
            for sample in samples:
                nodes = sample.nodes
                for name, used in zip(nodes.names, nodes.cpu_used_cores):  # noqa: B905 (columns)
                    cpu[name] = cpu.get(name, 0.0) + used / count
            role_used = {
                role: sum(cpu.get(n.name, 0.0) for n in shape.role(role))
                for role in (NodeRole.PS, NodeRole.WORKER)
            }
        object.__setattr__(self, "cpu", cpu)
        object.__setattr__(self, "_role_used", role_used)

    @property
    def memory(self) -> dict[str, float]:
        """Each node's mean memory bytes used (added in sample order)."""
        memory: dict[str, float] = {}
        count = len(self.samples) or 1
        for sample in self.samples:
            nodes = sample.nodes
            for name, used in zip(nodes.names, nodes.memory_used_bytes):  # noqa: B905 (columns)
                memory[name] = memory.get(name, 0.0) + used / count
        return memory

    def role_used(self, role: NodeRole) -> float:
        """The mean cores all nodes of ``role`` used."""
        return self._role_used[role]

    def worker_used(self) -> float:
        """``ŵ``: the mean cores one worker uses."""
        return self.role_used(NodeRole.WORKER) / max(1, self.shape.n_workers)

    def worker_memory(self) -> float:
        workers = self.shape.workers
        return statistics.fmean(self.memory.get(n.name, 0.0) for n in workers) if workers else 0.0

    def ps_utilization(self) -> float:
        allocated = self.shape.role_total(NodeRole.PS).cpu_cores
        return self.role_used(NodeRole.PS) / allocated if allocated else 0.0

    def ps_per_unhindered_worker(self) -> float:
        """``ŝ`` where no sampling stage measured it (ours): the PS CPU one worker needs at
        the speed it would reach if nothing held it back, ``s_used / N_w · a_wk / u_wk``.

        §4.2's ``ŝ`` is the PS CPU with one worker running at ``C_max``, which no PS holds
        back (sampling gives saturated PS more CPU first). A job launched with the job
        file's shape has no such sample, and what its PS use per worker now is held down
        by the bottleneck the formula is meant to lift: a hot PS uses at most its quota,
        and its workers idle while they wait for it. Taken as is (``s_used / N_w``), the
        hot-PS formula gave the hot PS exactly the CPU it used — never more than it had —
        so no hot PS of such a job was ever replaced. Per step, a PS does the same work at
        any speed, so its CPU grows with the speed: scaled by how far the workers are
        from using their own CPU (``a_wk / u_wk``, at least 1), it is the PS CPU the
        workers' full speed needs.
        """
        workers = self.shape.n_workers
        if not workers:
            return 0.0
        per_worker = self.role_used(NodeRole.PS) / workers
        used = self.role_used(NodeRole.WORKER)
        allocated = self.shape.role_total(NodeRole.WORKER).cpu_cores
        return per_worker * max(1.0, allocated / used) if used > 0 else per_worker


# Remembered (a shape and a budget are immutable): jobs of one model launch from the same few
# finished shapes under the trace's few budgets, once per job.
@lru_cache(maxsize=DERIVED_SHAPES)
def fit_into(shape: ClusterShape, budget: Resources) -> ClusterShape:
    """``shape`` brought within ``budget``: first fewer workers, then every node scaled down.

    DLRover sizes a worker by what one uses (``ŵ``), so a smaller budget keeps
    the workers' size and drops the share of them the budget cannot hold (at
    least one stays); what still exceeds the budget — the PS's part — is then
    scaled down in proportion on every node, CPU and, if the budget limits
    memory, memory. Scaling node sizes alone would keep the node count of a
    larger job, and over generations of similar jobs the counts would only grow.
    """
    factor = min(_fit_factors(shape.total(), budget))
    if factor >= 1:
        return shape
    keep = max(1, int(shape.n_workers * factor + 1e-9))
    for node in shape.workers[keep:]:
        shape = shape.without_node(node.name)
    cpu, memory = _fit_factors(shape.total(), budget)
    if cpu >= 1 and memory >= 1:
        return shape
    nodes = []
    for node in shape.nodes:
        res = node.resources
        scaled = Resources(res.cpu_cores * cpu, int(res.memory_bytes * memory), res.gpus)
        nodes.append(replace(node, resources=scaled))
    return ClusterShape(tuple(nodes))


def _fit_factors(total: Resources, budget: Resources) -> tuple[float, float]:
    """How much CPU and memory must shrink (at most 1) for ``total`` to fit ``budget``;
    a budget without memory does not limit memory."""
    cpu = min(1.0, budget.cpu_cores / total.cpu_cores) if total.cpu_cores else 1.0
    memory = 1.0
    if budget.memory_bytes and total.memory_bytes > budget.memory_bytes:
        memory = budget.memory_bytes / total.memory_bytes
    return cpu, memory


def with_worker_memory_doubled(shape: ClusterShape, limit: Resources | None) -> ClusterShape:
    """Every worker with twice its memory, capped at the node limit (§4.2, worker OOM)."""
    for node in shape.workers:
        memory = node.resources.memory_bytes * 2
        if limit is not None and limit.memory_bytes:
            memory = min(memory, limit.memory_bytes)
        shape = shape.with_resources(node.name, replace(node.resources, memory_bytes=memory))
    return shape


def with_ps_doubled(shape: ClusterShape) -> ClusterShape:
    """Twice as many PS, each with the memory of the first ones, so the PS hold twice the
    memory (§4.2, PS OOM); the PS's CPU is shared among them, since memory is the point."""
    cpu_total = shape.role_total(NodeRole.PS).cpu_cores
    for node in shape.ps:
        shape = shape.with_node_added(NodeRole.PS, node.resources)
    share = cpu_total / shape.n_ps
    for node in shape.ps:
        shape = shape.with_resources(node.name, replace(node.resources, cpu_cores=share))
    return shape
