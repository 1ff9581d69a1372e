"""A deterministic discrete-event simulator of many training jobs on one shared cluster.

Events, in time order (ties in the order they were scheduled):

- **arrive** — a trace job enters the waiting queue; the scheduler admits
  jobs whose launch plan fits what is free: the job's own ``initial_shape`` as it
  is, or its policy's plan for what is free (``Policy.launch_plan``) raised to the
  memory floors — as the runtime starts a job (:func:`scaling.launch.launch_plan`),
  through the launch advisor the service uses (:mod:`scaling.launch_advisor`; with no
  history, and the ``free`` launch share unless the simulator is given ``fair``).
- **ready** — a (re)start is over: the job trains at its shape's speed
  (``JobModel``), or reports its OOM-killed nodes.
- **tick** — every ``decision_interval_s`` a running job's metrics since its
  last change (``SimJob.collect``) go to ``Policy.decide``; a plan is raised to
  the memory floors (:mod:`scaling.floors`, as the runtime raises it), checked
  against the budget, the cluster and the node limit, then applied: the job
  stops, holds the new shape, and trains again after ``launch_s + init_s``.
- **complete** — the job has processed all its samples; it leaves, and the
  freed capacity goes first to the waiting queue, then to running jobs.

A job whose policy kept its shape over a full window (``max_window_s``) is no
longer polled — its shape, and so the distribution of its metrics, cannot
change — until capacity frees up; it is then asked again with its last
window. This keeps 10,000-job traces fast without changing any decision rule.
With links shared cluster-wide (``SimConfig.link_sharing``) other jobs'
traffic can still change a quiet job's speed; that alone does not poll it
again (an approximation: its policy had stopped, or saw nothing to change
over a full window).
Each job draws its noise from its own generator, spawned from the seed in
trace order, so a run is a pure function of (trace, cluster, policy, config).
"""

from __future__ import annotations

import gc
import heapq
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np

from rightsize.cluster.config import SimConfig
from rightsize.cluster.jobmodel import ClusterSpec, JobModel, SimModel
from rightsize.cluster.links import LinkBook
from rightsize.cluster.models import sim_model
from rightsize.cluster.priors import PriorBook
from rightsize.cluster.results import JobResult, SimResult, job_result
from rightsize.cluster.scheduler import Scheduler
from rightsize.cluster.simjob import SimJob, SimJobState
from rightsize.cluster.traces import Trace, TraceJob
from rightsize.core.errors import ResourceError, RightsizeError, SpecError, choose
from rightsize.core.resources import Resources
from rightsize.core.shape import MILLICORE, rounding_slack
from rightsize.core.spec import Strategy
from rightsize.scaling.api import LaunchRequest, Observation, Plan, Policy, ShapeRecord
from rightsize.scaling.floors import floored_plan
from rightsize.scaling.launch_advisor import (
    FAIR_SHARE_FLOOR_CORES,
    FairShare,
    LaunchAdvisor,
    LaunchShare,
)
from rightsize.scaling.oom import memory_doubled_after_oom
from rightsize.scaling.plan_check import plan_problems
from rightsize.scaling.shapes import one_ps_two_workers

ARRIVE, READY, TICK, COMPLETE = "arrive", "ready", "tick", "complete"
#: The node count whose rounding slack admission tolerates: a launch is allocated before its
#: nodes are counted by the scheduler, and launch shapes are small.
MAX_LAUNCH_NODES = 100


class Simulator:
    """Runs one trace on one cluster with one policy object driving every job.

    Args:
        cluster: the shared cluster.
        policy: the autoscaling policy every job uses.
        config: the mechanism's settings.
        models: looks up a trace's model name (``cluster.models.sim_model`` by default).
        launch_share: the launch advisor's fair share rule (``free``, NEARCHUS's allocator,
            is what every pinned result ran).
    """

    def __init__(
        self,
        cluster: ClusterSpec,
        policy: Policy,
        config: SimConfig | None = None,
        models: Callable[[str], SimModel] = sim_model,
        launch_share: LaunchShare = LaunchShare.FREE,
    ):
        self.cluster = cluster
        self.policy = policy
        self.config = config or SimConfig()
        self.models = models
        self.launch_share = choose(LaunchShare, launch_share, "launch share")

    def run(self, trace: Trace) -> SimResult:
        """Simulate ``trace`` to the end and summarize it.

        Raises:
            RightsizeError: a job's budget is below the policy's minimal shape, or its
                model is unknown (naming the job).
        """
        with cyclic_gc_paused():
            # built inside the pause too: setting up a long trace's jobs made the collector
            # walk the trace once more (a full collection, ~1% of a 10,000-job run)
            run = _Run(self, trace)
            result = run.go()
            # Let go of the run's books while the collector is paused: the first collection
            # after it resumes walks every object the run made and still holds (none was ever
            # collected), and the books are most of them.
            del run
        return result


@contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused for the block, and restored as it was.

    A run allocates millions of short-lived objects (metric samples, observations, plans)
    and keeps every finished job's result; the collector walked all of them again and again
    (5% of a 10,000-job run) and found nothing, because the simulator makes no reference
    cycles — reference counting frees every object it lets go of
    (``tests/test_cluster_speed.py`` checks that a paused run leaves no cycle behind). The
    pause is process-wide: a thread running beside the simulator collects no cycles until
    the run ends.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class _Run:
    """The state of one simulation run (the event loop and its books)."""

    def __init__(self, sim: Simulator, trace: Trace):
        self.cluster, self.policy, self.config = sim.cluster, sim.policy, sim.config
        self.trace, self.models = trace, sim.models
        self.advisor = LaunchAdvisor(sim.policy, sim.launch_share)
        cluster, config = self.cluster, self.config
        self.scheduler: Scheduler[SimJob] = Scheduler(cluster.capacity, config.order)
        self.priors = PriorBook()
        self.heap: list[tuple[float, int, str, SimJob, int]] = []
        self.seq = 0
        self.now = 0.0
        self.usage: list[tuple[float, float, float]] = []  # (t, cpu used, cpu allocated)
        self._launches: dict[str, Plan] = {}
        self._checked: set[tuple] = set()  # (model, budget, initial shape) checked
        self._results: dict[int, JobResult] = {}  # by id(job) (a SimJob is not hashable)
        self.links = LinkBook(config.link_sharing, cluster.servers, config.observed_link)
        seeds = np.random.SeedSequence(config.seed).spawn(len(trace.jobs))
        models: dict[str, JobModel] = {}
        self.templates: dict = {}  # every job's sample templates (``simjob.sample_template``)
        self.jobs = [
            self._job(spec, seed, models) for spec, seed in zip(trace.jobs, seeds, strict=True)
        ]

    def _job(self, spec: TraceJob, seed, models: dict[str, JobModel]) -> SimJob:
        if spec.model not in models:
            models[spec.model] = JobModel(self.models(spec.model), self.cluster)
        model = models[spec.model]
        total = spec.samples_total
        if total is None:  # a duration at the budget, as a fixed (1 PS, 2 workers) split
            total = spec.duration_s * model.evaluate(one_ps_two_workers(spec.budget)).samples_per_s
        rng = np.random.default_rng(seed)
        return SimJob(spec, model, float(total), rng, templates=self.templates)

    # -- the loop ----------------------------------------------------------------------
    def push(self, t: float, kind: str, job: SimJob, version: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, job, version))

    def go(self) -> SimResult:
        for job in self.jobs:
            self._check_budget(job)
            self.push(job.arrival_s, ARRIVE, job)
        handlers = {ARRIVE: self.arrive, READY: self.ready, TICK: self.tick}
        while self.heap:
            t, _, kind, job, version = heapq.heappop(self.heap)
            self.now = t
            if kind == COMPLETE:
                if version == job.version and job.state == SimJobState.RUNNING:
                    self.complete(job)
            elif kind != TICK or version == job.epoch:  # a tick from before a restart is void
                handlers[kind](job)
        results = tuple(self._result(j) for j in sorted(self.jobs, key=lambda j: j.arrival_s))
        return SimResult(
            self.policy.name, self.cluster.name, self.trace.name, self.config.seed,
            results, tuple(self.usage), self.cluster.cpu_cores,
        )  # fmt: skip

    def _check_budget(self, job: SimJob) -> None:
        """A job that can never start is the user's error: raise now, naming it, as the
        runtime refuses such a job before it starts — a budget below the policy's minimal
        shape, a launch shape whose memory floors do not fit the budget, an initial shape
        that cannot run. (Once per model, budget and initial shape: the answer depends on
        nothing else here.)"""
        key = (job.spec.model, job.budget, job.spec.initial_shape)
        if key in self._checked:
            return
        self._checked.add(key)
        try:
            plan, own = self._launch_plan(job, job.budget, alone=True)
        except RightsizeError as exc:
            raise type(exc)(f"job {job.name}: {exc}") from None
        if plan is None or plan is own:
            return  # the policy's own plan: checked when the job starts (a bug if it breaks)
        problems = plan_problems(plan.shape, job.budget, node_limit=self.cluster.node_limit)
        if problems:
            what = "initial shape" if own is None else "launch shape with each node's memory floor"
            error = SpecError if own is None else ResourceError
            raise error(f"job {job.name}: its {what} ({plan.shape.describe()}) cannot run: "
                        + "; ".join(problems))  # fmt: skip

    def _launch_plan(
        self, job: SimJob, free: Resources, alone: bool = False
    ) -> tuple[Plan | None, Plan | None]:
        """How ``job`` starts with ``free`` to start in (``alone``: as on an empty cluster,
        no fair share): its own initial shape as it is, or the launch advisor's plan raised
        to the memory floors, as the runtime starts a job (:func:`scaling.launch.launch_plan`);
        and the plan as the policy made it (``None`` for an initial shape)."""
        prior = job.book.prior = self.priors.prior(self.policy, job.model, job.budget)
        request = LaunchRequest(job.name, job.budget, free, prior, self.cluster.node_limit)
        initial = job.spec.initial_shape
        fair = None if alone else self._fair_share()
        plan = self.advisor.advise(request, initial, fair=fair).plan
        if plan is None or initial is not None:
            return plan, None
        return floored_plan(plan, job.model.memory_floors(plan.shape)), plan

    def _fair_share(self) -> FairShare | None:
        """Who else wants the cluster, for the ``fair`` launch share (None under ``free``)."""
        if self.advisor.share != LaunchShare.FAIR:
            return None
        scheduler = self.scheduler
        return FairShare(scheduler.fair_share_cores(FAIR_SHARE_FLOOR_CORES), scheduler.wanting(),
                         self.cluster.capacity.cpu_cores)  # fmt: skip

    # -- handlers ----------------------------------------------------------------------
    def arrive(self, job: SimJob) -> None:
        self.scheduler.submit(job)
        self.admit()

    def admit(self) -> None:
        for job in self.scheduler.admit(self._launch, rounding_slack(MAX_LAUNCH_NODES)):
            job.started_s = self.now
            job.last_update_s = self.now
            self._restart(job, self._launches.pop(job.name))
        self._record_usage()

    def _launch(self, job: SimJob, free: Resources) -> Resources | None:
        plan, own = self._launch_plan(job, free)
        if plan is None or not self._fits(job, plan, own, free):
            return None  # it waits (its own shape, or its floors, need more than is free)
        self._launches[job.name] = plan  # applied by admit() once the scheduler accepts it
        return plan.shape.total()

    def ready(self, job: SimJob) -> None:
        if not job.perf.oom_nodes:
            self.links.start(job)
        job.ready(self.now)
        self._schedule_completion(job)
        self._reshare()
        self._record_usage()
        self.push(self._first_tick_s(job), TICK, job, job.epoch)

    def _first_tick_s(self, job: SimJob) -> float:
        """One interval from now — or, if the policy says it cannot decide before a later time
        (Optimus: an interval after the shape was requested; NEARCHUS: ``N_comp`` stability
        periods after its first sample), that time, provided nothing the skipped ticks would
        have done can show: the job is training, will not finish first (its window at
        completion is its last tick's), and no sample will have left the window by then (the
        later tick generates the same samples from the same draws).
        This reads ``decision_due_s`` on an empty window as a bound no sample can bring
        forward — true of every policy here (checked: identical results), and a policy whose
        due date depends on what it measures answers "now" to an empty window (DLRover). The
        window stays empty until the first sample, one metric interval after the (re)start,
        so the policy is asked as of then (a stability detector's count starts there)."""
        cfg = self.config
        first = self.now + cfg.decision_interval_s
        if job.rate <= 0:  # OOM-killed: asked every interval (see _next_tick)
            return first
        first_sample_s = job.next_sample_s + cfg.metric_interval_s
        due_s = self.policy.decision_due_s(self._observe(job, at=first_sample_s))
        when = (job.started_s or 0.0) + due_s
        completion_s = job.completion_s()
        if (
            math.isinf(due_s)  # asked once, then quiet (see _next_tick)
            or when < first + cfg.decision_interval_s  # the earliest second tick
            or when > self.now + cfg.max_window_s
            or (completion_s is not None and when >= completion_s)
        ):
            return first
        return when

    def tick(self, job: SimJob) -> None:
        if job.state != SimJobState.RUNNING:
            return
        cfg = self.config
        if not job.quiet:
            job.collect(self.now, cfg.metric_interval_s, cfg.max_window_s, cfg.noise)
        observation = self._observe(job)
        plan = self._plan(job, observation)
        if plan is not None:
            slack = rounding_slack(len(plan.shape.nodes))
            self.scheduler.allocate(job.name, plan.shape.total(), slack)
            self._restart(job, plan)
            self._record_usage()
            return
        if job.rate <= 0 and self.now - job.ready_s >= cfg.oom_patience_s:
            self._fail(job)
            return
        self._next_tick(job, self.policy.decision_due_s(observation))

    def _plan(self, job: SimJob, observation: Observation) -> Plan | None:
        """What the mechanism applies after asking the policy, as the runtime's control loop
        and master do: the policy's plan — or, if it keeps an OOM-killed job's shape, the
        OOM safety net's — raised to the memory floors, if it fits (``None``: no change)."""
        plan = own = self.policy.decide(observation)
        if plan is None and job.rate <= 0:
            plan = self._oom_safety_net(job)
        if plan is None:
            return None
        floors = job.model.memory_floors(plan.shape)
        if floors:  # (none where no node was given memory: CPU-only budgets)
            plan = floored_plan(plan, floors)
        return plan if self._fits(job, plan, own, self.scheduler.free_for_running()) else None

    def _oom_safety_net(self, job: SimJob) -> Plan | None:
        """The runtime's answer to OOM kills the policy left alone (:mod:`scaling.oom`): the
        killed nodes relaunched with twice their memory, within the budget and what the
        cluster has free."""
        killed = {name: job.shape.node(name).resources.memory_bytes for name in job.perf.oom_nodes}
        left = self.scheduler.free_for_running().memory_bytes
        if job.budget.memory_bytes:
            left = min(left, job.budget.memory_bytes - job.shape.total().memory_bytes)
        return memory_doubled_after_oom(job.shape, killed, max(0, left))

    def _next_tick(self, job: SimJob, due_s: float) -> None:
        """Ask again at the next interval, or when the policy says it could decide; a job
        whose policy has nothing to decide, or kept its shape over a full window, goes quiet."""
        cfg = self.config
        window = job.book.window
        full = bool(window) and window[-1].time_s - window[0].time_s >= (
            cfg.max_window_s - 2 * cfg.metric_interval_s
        )
        if job.rate <= 0:  # OOM-killed: keep asking until the policy fixes it or patience ends
            self.push(self.now + cfg.decision_interval_s, TICK, job, job.epoch)
            return
        job.quiet = math.isinf(due_s) or full
        if not job.quiet:
            when = max(self.now + cfg.decision_interval_s, (job.started_s or 0.0) + due_s)
            self.push(when, TICK, job, job.epoch)

    def complete(self, job: SimJob) -> None:
        job.advance(self.now)
        job.state = SimJobState.FINISHED
        job.finished_s = self.now
        job.set_rate(self.now, 0.0, 0.0)
        if self.links.stop(job):
            self._reshare()
        self.priors.record_finished(job.spec.model, ShapeRecord(job.shape, job.measured_speed()))
        self._retire(job)
        self.admit()
        self._wake()

    # -- mechanics ---------------------------------------------------------------------
    def _restart(self, job: SimJob, plan: Plan) -> None:
        stopped = self.links.stop(job)
        job.restart(self.now, plan, self.config.transition_s(job.shape, plan.shape))
        job.quiet = False
        self.push(job.ready_s, READY, job)
        if stopped:
            self._reshare()

    def _reshare(self) -> None:
        """The training nodes changed: move every job whose link share changed its speed to
        the new speed, and its metrics to the new link capacity, from now (a job still polled
        first measures what it ran at so far)."""
        cfg = self.config
        for job, perf, link in self.links.changed(self.scheduler.running):
            if not job.quiet:
                job.collect(self.now, cfg.metric_interval_s, cfg.max_window_s, cfg.noise)
            job.observed_link_bytes_per_s = link
            if perf is not job.perf:
                job.rerate(self.now, perf)
                self._schedule_completion(job)

    def _schedule_completion(self, job: SimJob) -> None:
        when = job.completion_s()
        if when is not None:
            self.push(when, COMPLETE, job, job.version)

    def _fail(self, job: SimJob) -> None:
        job.state = SimJobState.FAILED
        job.finished_s = self.now
        job.set_rate(self.now, 0.0, 0.0)
        self.links.stop(job)  # (only OOM-killed jobs fail, and they hold no link share)
        self._retire(job)
        self.admit()
        self._wake()

    def _retire(self, job: SimJob) -> None:
        """``job`` is over: it leaves the cluster, its result is taken now, and what only its
        run read (metrics, shape history, plans) is let go — a long trace keeps every finished
        job, and those were most of what the garbage collector walked again and again."""
        self.scheduler.finish(job)
        self._results[id(job)] = job_result(job)
        job.release()

    def _result(self, job: SimJob) -> JobResult:
        """``job``'s result, as taken when it ended (or now, if it never did)."""
        return self._results.get(id(job)) or job_result(job)

    def _wake(self) -> None:
        """Capacity was freed: ask quiet running jobs again, in queue order."""
        if not self.scheduler.free_for_running().cpu_cores:
            return
        for job in self.scheduler.running:
            held = self.scheduler.held(job.name).cpu_cores
            if job.quiet and held < job.budget.cpu_cores - MILLICORE:
                self.push(self.now, TICK, job, job.epoch)  # asked with its last window

    def _observe(self, job: SimJob, at: float | None = None) -> Observation:
        """The job as its policy sees it now (or at ``at``, for a job with nothing new to see
        before then: see ``_first_tick_s``)."""
        return job.observe(self.now if at is None else at, self.scheduler.free_for_running())

    def _fits(self, job: SimJob, plan: Plan, own: Plan | None, free: Resources) -> bool:
        """Whether ``plan`` can run, by the rules every mechanism checks (budget, free
        capacity, node limit, roles). ``own`` is the plan as the policy made it (``None``:
        the mechanism made it — an initial shape, the OOM safety net).

        Raises:
            RuntimeError: the policy's own plan breaks the rules (a policy bug). A plan the
                mechanism made or raised (to the memory floors) that does not fit is refused
                instead — as the runtime refuses it: the job keeps its shape, or waits.
        """
        held = job.shape.total() if job.state != SimJobState.WAITING else None
        rules = (job.budget, Strategy.PS, held, free, self.cluster.node_limit)
        problems = plan_problems(plan.shape, *rules)
        if not problems:
            return True
        if own is None or (own is not plan and not plan_problems(own.shape, *rules)):
            return False
        raise RuntimeError(
            f"policy {self.policy.name} planned {plan.shape.describe()} for {job.name}: "
            + "; ".join(problems)
        )

    def _record_usage(self) -> None:
        used = sum([j.perf.cpu_used_cores for j in self.scheduler.running if j.rate > 0])
        allocated = self.scheduler.allocated.cpu_cores
        if self.usage and self.usage[-1][0] == self.now:
            self.usage.pop()  # several changes at one instant: keep the last
        self.usage.append((self.now, used, allocated))


__all__ = ["JobResult", "SimConfig", "SimResult", "Simulator"]
