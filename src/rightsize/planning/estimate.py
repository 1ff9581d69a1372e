"""Predicting one configuration's iteration time and cost (Srift's SIM, §4.3), fast enough to search.

The search evaluates thousands of configurations, so the expensive parts are
shared: for every (instance type, per-VM batch) the straggler draws are made
once — ``iterations × cap`` normal samples with a running maximum over VMs, so
the compute phase of any VM count is a lookup — and the event-queue exchange
simulation is cached by (world size, link, backward time). A compute-only lower
bound, which needs no exchange simulation, lets the solver skip configurations
that cannot beat the best found.

Beyond Srift, ``exchange="ddp-probe"`` predicts a DDP step as its compute
plus the overhead this host's DDP probe measured (``perf/ddp_overhead.py``:
copies, allreduce and the wait for the slowest rank together) plus the
optimizer step, for configurations on the probed host and world sizes; any
other configuration falls back to ``ddp-serial``, and the plan says which
model it used.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from rightsize.core.spec import Constraints, Objective
from rightsize.perf.comm import CommModel, Link
from rightsize.perf.ddp_overhead import DdpOverheadModel
from rightsize.perf.iteration import (
    EXCHANGES,
    combine,
    ddp_copy_s,
    exchange_s,
    is_ddp,
)
from rightsize.planning.options import InstanceOption
from rightsize.planning.plan import CloudPlan, Config

STRAGGLER_ITERATIONS = 200  # Srift samples one draw per iteration; 200 draws settle the mean
DDP_PROBE = "ddp-probe"
PLAN_EXCHANGES = (*EXCHANGES, DDP_PROBE)
#: where ``ddp-probe`` has no probe for a configuration
DDP_PROBE_FALLBACK = "ddp-serial"


@dataclass(frozen=True)
class PlanRequest:
    """What to plan for.

    Attributes:
        global_batch: ``B_global``, samples per step summed over all VMs.
        iterations: ``N``, training steps.
        constraints: deadline and/or budget (either may be absent).
        objective: minimise total cost or total time.
        exchange: ``per-layer`` (Srift), ``ddp-buckets`` or ``ddp-serial`` (a PyTorch
            DDP step: + bucket copies and the optimizer step; see perf/iteration.py), or
            ``ddp-probe`` (the module docstring), which needs ``ddp_probe``.
        launch_s: startup time of a configuration that launches new VMs.
        warm: VMs already running, by instance type; a configuration within them
            needs no launch (re-planning after a preemption, Srift §4.5).
        restart_s: time every configuration loses before training resumes.
        seed: seed of the straggler draws.
        ddp_probe: this host's DDP probe, for ``exchange="ddp-probe"``.
    """

    global_batch: int
    iterations: int
    constraints: Constraints = Constraints()
    objective: Objective = Objective.COST
    exchange: str = "per-layer"
    launch_s: float = 0.0
    warm: tuple[tuple[str, int], ...] = ()
    restart_s: float = 0.0
    seed: int = 0
    ddp_probe: DdpOverheadModel | None = None

    def __post_init__(self) -> None:
        if self.exchange not in PLAN_EXCHANGES:
            raise ValueError(f"exchange must be one of {PLAN_EXCHANGES}, got {self.exchange!r}")
        if self.exchange == DDP_PROBE and self.ddp_probe is None:
            raise ValueError("exchange 'ddp-probe' needs a DDP probe (ddp_probe)")

    def startup_s(self, config: Config) -> float:
        running = dict(self.warm)
        new = any(s.count > running.get(s.instance, 0) for s in config.slots)
        return self.restart_s + (self.launch_s if new else 0.0)


@dataclass(frozen=True)
class _Step:
    """What a configuration's step is made of before its exchange is simulated.

    Attributes:
        option: the type with the slowest mean compute: its gradients and optimizer count.
        mean_s: that type's mean compute time.
        backward_s: the backward share of the configuration's compute, stragglers included.
        link: the slowest link among the types.
        mode: the exchange mode (``ddp-probe`` only where the probe covers the configuration).
    """

    option: InstanceOption
    mean_s: float
    backward_s: float
    link: Link
    mode: str


class Estimator:
    """Predicts :class:`CloudPlan` numbers for configurations over one set of options."""

    def __init__(
        self, options: dict[str, InstanceOption], comm: CommModel, request: PlanRequest
    ) -> None:
        self.options, self.comm, self.request = options, comm, request
        self._draws: dict[tuple[str, int], np.ndarray] = {}
        self._exchange: dict[tuple[int, str, float], float] = {}
        self._floor: dict[tuple[int, str, int], float] = {}

    def _running_max(self, name: str, batch: int) -> np.ndarray:
        """``[c-1, i]``: slowest of ``c`` VMs in iteration ``i`` (one set of draws per type and batch)."""
        key = (name, batch)
        if key not in self._draws:
            option = self.options[name]
            mean = option.vm_compute(batch).total_s
            # Seeded by (seed, type, batch), not drawn from one stream, so that a
            # configuration's prediction does not depend on the order a search visits it in.
            rng = np.random.default_rng((self.request.seed, zlib.crc32(name.encode()), batch))
            draws = rng.normal(mean, option.cv * mean, size=(option.cap, STRAGGLER_ITERATIONS))
            self._draws[key] = np.maximum.accumulate(np.maximum(draws, 0.0), axis=0)
        return self._draws[key]

    def slowest_vm_s(self, name: str, batch: int) -> np.ndarray:
        """``[c-1]``: mean over iterations of the slowest of ``c`` VMs of ``name`` at ``batch``.

        Every configuration holding that slot computes at least this long (the search's bounds).
        """
        return self._running_max(name, batch).mean(axis=1)

    def compute_s(self, config: Config) -> float:
        """Mean over iterations of the slowest VM's compute time (Srift §4.3)."""
        slowest = np.zeros(STRAGGLER_ITERATIONS)
        for slot in config.slots:
            slowest = np.maximum(
                slowest, self._running_max(slot.instance, slot.batch)[slot.count - 1]
            )
        return float(slowest.mean())

    def price_per_hour(self, config: Config) -> float:
        return sum(self.options[s.instance].price_per_hour * s.count for s in config.slots)

    def objective_value(self, seconds_per_iter: float, config: Config) -> float:
        total = self.request.startup_s(config) + self.request.iterations * seconds_per_iter
        if self.request.objective == Objective.TIME:
            return total
        return total / 3600 * self.price_per_hour(config)

    def bound_plan(self, config: Config) -> CloudPlan:
        """The plan if every gradient moved at the link's full capacity from the start of
        backward. The simulator never gives concurrent transfers more than ``b_cap`` together,
        so no prediction is faster or cheaper: a configuration whose bound plan misses the
        deadline, the budget or the k-th best can be passed over. Where the DDP probe
        predicts the step, compute alone bounds it."""
        compute = self.compute_s(config)
        step = self._step(config, compute)
        seconds = compute
        if step.mode != DDP_PROBE:
            floor = self.exchange_floor_s(config.vms, step.link, step.option.gradient_bytes)
            seconds = self._combine(compute, step, floor)
        return self._plan(config, seconds, "bound", {})

    def estimate(self, config: Config, policy: str = "srift") -> CloudPlan:
        """Full prediction: stragglers, then :func:`~rightsize.perf.iteration.combine`'s
        ``t_fw + max(t_bw, t_pe)`` with the exchange cached per (VMs, link, backward)."""
        compute = self.compute_s(config)
        step = self._step(config, compute)
        option, link = step.option, step.link
        models = {s.instance: self.options[s.instance].provenance for s in config.slots}
        if step.mode == DDP_PROBE:
            probe = self.request.ddp_probe
            overhead = probe.overhead_s(config.vms, option.gradient_bytes, step.mean_s)
            seconds = compute + overhead + option.optimizer_s
            models["comm"] = probe.kind
            return self._plan(config, seconds, policy, models)
        models["comm"] = self.comm.kind_for(link)
        if self.request.exchange == DDP_PROBE:
            models["comm"] += ", no DDP probe"
        key = (config.vms, link.name, round(step.backward_s, 9))
        if key not in self._exchange:
            self._exchange[key] = exchange_s(
                option.layers, step.backward_s, config.vms, self.comm, link, step.mode
            )
        seconds = self._combine(compute, step, self._exchange[key])
        return self._plan(config, seconds, policy, models)

    def _step(self, config: Config, compute: float) -> _Step:
        slowest = max(
            config.slots, key=lambda s: self.options[s.instance].vm_compute(s.batch).total_s
        )
        option = self.options[slowest.instance]
        mean = option.vm_compute(slowest.batch)
        link = min(
            (self.options[s.instance].link for s in config.slots), key=lambda k: k.rated_gbps
        )
        mode = self.request.exchange
        if mode == DDP_PROBE and not self.request.ddp_probe.covers(link.name, config.vms):
            mode = DDP_PROBE_FALLBACK
        return _Step(option, mean.total_s, compute * mean.backward_s / mean.total_s, link, mode)

    def _combine(self, compute: float, step: _Step, exchange: float) -> float:
        ddp = is_ddp(step.mode)
        option = step.option
        optimizer = option.optimizer_s if ddp else 0.0
        copies = ddp_copy_s(option.layers, option.mem_bytes_per_s) if ddp else 0.0
        backward = step.backward_s
        return combine(
            compute - backward, backward, exchange, step.mode, optimizer, copies
        ).iteration_s

    def exchange_floor_s(self, vms: int, link: Link, grad_bytes: int) -> float:
        """``t_pe`` if ``link``'s capacity carried every gradient's bus bytes, 2·G·(n-1)/n, from
        the start: the simulator never gives concurrent transfers more, so no exchange of
        ``grad_bytes`` among ``vms`` VMs is faster."""
        if vms <= 1:
            return 0.0
        key = (vms, link.name, grad_bytes)
        if key not in self._floor:
            bus_bytes = 2 * grad_bytes * (vms - 1) / vms
            self._floor[key] = bus_bytes / self.comm.capacity(vms, link)
        return self._floor[key]

    def _plan(self, config: Config, seconds: float, policy: str, models: dict) -> CloudPlan:
        spreads = [self.options[s.instance].log_spread for s in config.slots]
        spread = None if None in spreads else max(spreads)
        return CloudPlan(config, seconds, self.request.iterations, self.price_per_hour(config),
                         policy, models, self.request.startup_s(config), spread)  # fmt: skip

    def feasible(self, plan: CloudPlan) -> bool:
        limits = self.request.constraints
        return (limits.deadline_s is None or plan.total_seconds <= limits.deadline_s) and (
            limits.budget_usd is None or plan.total_cost <= limits.budget_usd
        )
