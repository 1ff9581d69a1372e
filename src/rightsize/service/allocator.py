"""The service's scheduler: real jobs through the queues the simulator uses.

NEARCHUS §IV: submitted jobs wait in the *waiting queue*; the Resource Allocator
moves a job to the *running queue* and launches it once its policy's launch plan fits
what is free (``R0`` of the budget for NEARCHUS and Optimus, the whole shape for
FA-BF); a job that ends moves to the *finished queue*. The queues and the books are
cluster/scheduler.py's :class:`Scheduler` — the very object the simulator drives —
and this module drives it with real jobs: each admitted job runs in a runner process
(:mod:`runner`) that asks the scheduler's books before it grows (:mod:`lease`), so
the sum of what running jobs hold never exceeds the capacity, growth included.

Three parts, each its own module: the lease books the runners ask (:mod:`books`, over the
scheduler's methods), where a job starts (``scaling.launch_advisor``, which the simulator
asks too: history, else prediction, else policy, within a fair share under ``fair``) and
how a runner is started and watched (:mod:`launcher`, injected: tests give a fake one).
This module is what joins them: the API's verbs and the loop.

One thread turns the loop every ``poll_s``: admit, reap runners that ended, copy
running jobs' state files into the store. The lease threads and the API's calls
(submit, cancel) take the same lock. A service killed at any moment leaves running
jobs marked running in the store; the next service on the same store queues them
first, with what they last held, and their masters resume from their checkpoints.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rightsize.cluster.scheduler import Scheduler, SchedulingOrder
from rightsize.core.errors import RightsizeError, SpecError, choose, unknown_name
from rightsize.core.resources import Resources
from rightsize.core.spec import JobSpec, ShapeSpec
from rightsize.planning.local import (
    LaunchPrediction,
    predict_launch,
    predicted_records,
    samples_of,
)
from rightsize.runtime.state import read_shape
from rightsize.scaling.api import LaunchRequest, Plan, Policy, ShapeRecord
from rightsize.scaling.launch_advisor import (
    FAIR_SHARE_FLOOR_CORES,
    FairShare,
    LaunchAdvisor,
    LaunchShare,
    LaunchSource,
    PastRun,
)
from rightsize.scaling.registry import policy_for
from rightsize.service import history
from rightsize.service.books import LeaseBooks
from rightsize.service.host import held_beside
from rightsize.service.launcher import ProcessLauncher, RunnerLauncher, RunnerProcess
from rightsize.service.models import JobPhase, Source
from rightsize.service.schemas import JobView, LaunchPreview
from rightsize.service.store import Store
from rightsize.service.uploads import Uploads

__all__ = ["Allocator", "LaunchShare", "QueuedJob"]

#: Seconds the loop waits after a submission for the next one before it admits, and the most
#: it waits so in all: jobs submitted together arrive milliseconds apart, and a fair share
#: counts only the jobs it can see (the first would otherwise take the whole budget alone).
GATHER_S, GATHER_MAX_S = 0.3, 2.0
#: Seconds between copies of a running job's state file into the store.
INGEST_EVERY_S = 2.0
#: Seconds a runner gets to checkpoint and stop when the service shuts down.
STOP_GRACE_S = 60.0


@dataclass(eq=False)
class QueuedJob:
    """A job in the scheduler's queues (cluster/scheduler.py's ``Queued``)."""

    name: str
    arrival_s: float
    work_core_s: float  # SJF orders by the samples the job trains (``planning.local.samples_of``)
    job_id: int
    spec: JobSpec
    held: Resources | None = None  # what a job resumed after a restart last held
    plan: Plan | None = None  # set on admission
    source: LaunchSource = LaunchSource.POLICY  # where the launch plan came from
    history: tuple[PastRun, ...] | None = None  # read once, at first try
    advisor: LaunchAdvisor | None = None  # the launch advisor over its policy, built at first try
    predicted: tuple[ShapeRecord, ...] | None = None  # its prior shapes at predicted speeds


@dataclass(eq=False)
class Runner:
    """A running job's runner, as the loop watches it."""

    job: QueuedJob
    process: RunnerProcess
    cancelled: bool = False
    ingested_at: float = field(default=0.0)


class Allocator:
    """Admits, launches, watches and cancels the service's jobs over ``capacity``.

    Args:
        store: where jobs and their runs are kept.
        capacity: what all running jobs together may hold (the machine, or a share).
        workdir: each job's checkpoints, state file, report and log go to ``workdir/jobs/ID``.
        order: the queues' :class:`SchedulingOrder` (or its name).
        poll_s: seconds between the loop's turns when nothing wakes it.
        beside: what other rightsize jobs on the host hold, given the runners' pids.
        launch_share: how much of the capacity a policy's launch may take (:class:`LaunchShare`).
        launcher: starts each admitted job's runner (:class:`ProcessLauncher` by default).
    """

    def __init__(self, store: Store, capacity: Resources, workdir: Path,
                 order: SchedulingOrder = SchedulingOrder.FCFS, poll_s: float = 1.0,
                 beside: Callable[[set[int]], Resources] = held_beside,
                 launch_share: LaunchShare = LaunchShare.FAIR,
                 launcher: RunnerLauncher | None = None) -> None:  # fmt: skip
        self.store, self.capacity, self.workdir, self.poll_s = store, capacity, workdir, poll_s
        self.launch_share = choose(LaunchShare, launch_share, "launch share")
        self.beside = beside  # what other rightsize jobs on the host hold (service/host.py)
        self.uploads = Uploads(workdir / "uploads")
        self.launcher = launcher or ProcessLauncher(self.uploads)
        self.scheduler: Scheduler[QueuedJob] = Scheduler(capacity, order)
        self.lock = threading.RLock()
        self.books = LeaseBooks(self.scheduler, self.lock)  # what runners' leases ask
        self.runners: dict[str, Runner] = {}
        self._wake = threading.Event()
        self._submitted = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._refused: list[tuple[QueuedJob, RightsizeError]] = []  # this turn's, by admission

    # -- the API's verbs -------------------------------------------------------------------
    def check(self, spec: JobSpec, owner_id: int | None = None) -> None:
        """Everything about ``spec`` that would stop it running here, before it queues
        (an uploaded workload only for its owner).

        Raises:
            SpecError: names the field and the reason.
        """
        budget = spec.budget.resources
        if budget.cpu_cores > self.capacity.cpu_cores:
            raise SpecError(f"{budget.cpu_cores:g} cores is more than the service's "
                            f"capacity of {self.capacity.cpu_cores:g}", field="budget.cpu")  # fmt: skip
        if budget.memory_bytes > self.capacity.memory_bytes:
            raise SpecError(f"{budget} is more than the service's capacity "
                            f"{self.capacity}", field="budget.memory")  # fmt: skip
        if budget.gpus > self.capacity.gpus:
            raise SpecError(f"{budget.gpus} but the service has "
                            f"{self.capacity.gpus}", field="budget.gpus")  # fmt: skip
        try:
            policy = policy_for(spec)
        except RightsizeError as exc:
            raise SpecError(str(exc), field="policy") from None
        if not isinstance(spec.initial_shape, ShapeSpec):
            try:  # the policy's launch on an empty service: a budget it cannot start in fails now
                prior = self._predicted_prior(spec, policy)
                LaunchAdvisor(policy).advise(LaunchRequest(spec.name, budget, self.capacity, prior,
                                                           self.capacity))  # fmt: skip
            except RightsizeError as exc:
                raise SpecError(str(exc), field="budget") from None
        if spec.is_script:
            self.uploads.script_path(spec.script, owner_id)  # the owner's upload, or refused
        else:
            _check_names(spec)
            self.uploads.check_use(spec.workload, owner_id)

    def _resolved(self, spec: JobSpec, owner_id: int | None) -> JobSpec:
        """``spec`` with an uploaded script's name replaced by its file (what the ranks run)."""
        if not spec.is_script:
            return spec
        path = self.uploads.script_path(spec.script, owner_id)
        return spec.model_copy(update={"script": str(path.resolve())})

    def preview(self, spec: JobSpec, owner_id: int | None = None) -> LaunchPreview:
        """Where ``spec`` would start on an empty service, from the same rules admission uses
        (:meth:`_launch_now`), and what that launch is predicted to take; nothing is queued.

        Raises:
            SpecError: what :meth:`check` refuses.
        """
        self.check(spec, owner_id)
        spec = self._resolved(spec, owner_id)
        probe = QueuedJob(spec.name, time.time(), samples_of(spec), 0, spec)
        if self._launch_now(probe, self.capacity, alone=True) is None or probe.plan is None:
            raise SpecError("the job cannot start even on an empty service", field="budget")
        plan, total = probe.plan, probe.plan.shape.total()
        expected = _expected(plan, spec)
        with self.lock:
            free, waiting = self.scheduler.free_for_running(), len(self.scheduler.waiting)
        return LaunchPreview(
            source=str(probe.source), shape=plan.shape.to_dict(), shape_text=plan.shape.describe(),
            reason=plan.reason, cpu_cores=total.cpu_cores, memory_bytes=total.memory_bytes,
            predicted_time_s=expected and expected.time_s,
            predicted_core_h=expected and expected.core_h,
            predicted_note=expected and expected.source,
            fits_now=not waiting and total.fits_within(free), waiting=waiting,
        )  # fmt: skip

    def submit(self, spec: JobSpec, owner_id: int | None) -> JobView:
        """Queue ``spec`` (checked first: :meth:`check`); its name is made unique."""
        self.check(spec, owner_id)
        spec = self._resolved(spec, owner_id)
        row = self.store.add_job(spec, owner_id=owner_id, source=Source.SERVICE,
                                 phase=JobPhase.WAITING, state_path=Path(),
                                 policy=spec.policy.name)  # fmt: skip
        home = self.workdir / "jobs" / str(row.id)
        spec = spec.model_copy(update={
            "name": row.name,
            "checkpoint": spec.checkpoint.model_copy(update={"dir": home}),
            "runtime": spec.runtime.model_copy(update={"state": None}),
        })  # fmt: skip
        self.store.update(row.id, spec=spec.model_dump(mode="json", by_alias=True),
                          state_path=str(spec.state_path))  # fmt: skip
        with self.lock:
            self.scheduler.submit(QueuedJob(row.name, time.time(), samples_of(spec), row.id, spec))
        self._submitted.set()
        self._wake.set()
        return self.store.job_by_id(row.id)

    def cancel(self, name: str) -> None:
        """Stop ``name`` wherever it is: out of the queue, or its runner checkpoints and ends."""
        with self.lock:
            waiting = self.scheduler.cancel(name)
            if waiting is not None:
                self.store.finish(waiting.job_id, JobPhase.CANCELLED, None, "cancelled")
                return
            runner = self.runners.get(name)
            if runner is not None and not runner.cancelled:
                runner.cancelled = True
                runner.process.terminate()
        self._wake.set()

    # -- the loop --------------------------------------------------------------------------
    def start(self) -> None:
        """Queue what the store says was waiting or running, then start the loop."""
        self._recover()
        self._thread = threading.Thread(target=self._loop, name="allocator", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the loop; runners checkpoint and end, and their jobs stay running in the store
        (the next service resumes them)."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()

    def _loop(self) -> None:
        while not self._stopping.is_set():
            self.turn()
            self._wake.wait(self.poll_s)
            self._wake.clear()
            self._gather()
        self._stop_runners()

    def _gather(self) -> None:
        """After a submission, wait while more follow (:data:`GATHER_S` apart, at most
        :data:`GATHER_MAX_S`), so that jobs submitted together are admitted together."""
        deadline = time.monotonic() + GATHER_MAX_S
        while self._submitted.is_set() and time.monotonic() < deadline:
            self._submitted.clear()
            if self._stopping.wait(GATHER_S):
                return

    def _stop_runners(self) -> None:
        """Stop every runner and wait for it — from the thread that started them: a runner
        dies with that thread (its parent-death signal), so it must outlive them."""
        with self.lock:
            runners = list(self.runners.values())
        for runner in runners:
            runner.process.terminate()
        for runner in runners:
            runner.process.wait(STOP_GRACE_S)
            self.store.ingest(runner.job.job_id, runner.job.spec.state_path)

    def turn(self) -> None:
        """One turn: reap ended runners, admit what fits, copy running jobs' progress.

        A failure here is the service's bug, not a job's: it is printed and the loop goes on
        (a job that cannot be admitted fails alone, in :meth:`_admission`)."""
        try:
            self._turn()
        except Exception:  # noqa: BLE001 — the loop must outlive any one turn
            traceback.print_exc(file=sys.stderr)

    def _turn(self) -> None:
        with self.lock:
            self._reap()
            self._count_what_is_beside()
            started = self.scheduler.admit(self._admission)  # what fits exactly: no slack
            for job, why in self._refused:  # out of the queue once admission is over
                self._fail(job, why)
            self._refused.clear()
            for job in started:
                try:
                    self._spawn(job)
                except RightsizeError as exc:  # e.g. uploaded code and no cgroups to run it in
                    self._fail(job, exc)
            now = time.monotonic()
            for runner in self.runners.values():
                if now - runner.ingested_at >= INGEST_EVERY_S:
                    self.store.ingest(runner.job.job_id, runner.job.spec.state_path)
                    runner.ingested_at = now

    def _recover(self) -> None:
        for row in self.store.jobs(phases=(JobPhase.RUNNING, JobPhase.WAITING)):
            if row.source != str(Source.SERVICE):
                continue
            spec = JobSpec.model_validate(self.store.spec_of(row.id))
            if _trained(spec):  # it ended while no service watched: keep what it wrote
                self.store.ingest(row.id, spec.state_path)
                report = spec.checkpoint.dir / "report.json"
                self.store.finish(
                    row.id,
                    JobPhase.FINISHED,
                    json.loads(report.read_text()) if report.exists() else None,
                )
                continue
            held = None
            if row.phase == str(JobPhase.RUNNING):  # the state file, not the store's copy of it
                shape = read_shape(spec.state_path)  # (the copy may lag the last change)
                held = shape.total() if shape else None
            with self.lock:
                self.scheduler.submit(QueuedJob(row.name, row.submitted_at, samples_of(spec), row.id,
                                                spec, held))  # fmt: skip

    def _count_what_is_beside(self) -> None:
        """The scheduler's capacity this turn: the service's, less what rightsize jobs it does
        not run hold on this host (a standalone run's quotas are the kernel's too)."""
        outside = self.beside({runner.process.pid for runner in self.runners.values()})
        self.scheduler.set_capacity(self.capacity.less(outside))

    def _admission(self, job: QueuedJob, free: Resources) -> Resources | None:
        """What ``job`` takes if it starts now, or None (it and those behind it wait). A job
        whose launch cannot be planned is set aside, to fail once admission is over (the
        queue it would leave is the one being admitted from), and waits until then."""
        try:
            return self._launch_now(job, free)
        except RightsizeError as exc:
            self._refused.append((job, exc))
            return None

    def _fail(self, job: QueuedJob, why: RightsizeError) -> None:
        """``job`` cannot be launched: it leaves the scheduler and fails in the store."""
        self.scheduler.fail(job)
        self.store.finish(job.job_id, JobPhase.FAILED, None, f"cannot launch: {why}")

    def _launch_now(self, job: QueuedJob, free: Resources, alone: bool = False) -> Resources | None:
        """What ``job`` takes if it starts now with ``free`` (``alone``: as on an empty
        service, no fair share), or None; its plan and source are left on ``job``."""
        if job.held is not None:  # resumed: its master relaunches what it last ran
            return job.held if job.held.fits_within(free) else None
        spec = job.spec
        if job.advisor is None:  # built once, as what follows: admission is retried every turn
            job.advisor = LaunchAdvisor(policy_for(spec), self.launch_share)
        initial = spec.initial_shape
        initial = initial.to_shape() if isinstance(initial, ShapeSpec) else None
        if initial is None and job.history is None:  # what a job that names its shape never asks
            job.history = history.past_runs(history.found(self.store, spec))
            job.predicted = self._predicted_prior(spec, job.advisor.policy)
        request = LaunchRequest(spec.name, spec.budget.resources, free, job.predicted or (),
                                self.capacity)  # fmt: skip
        launch = job.advisor.advise(request, initial, job.history or (), self.capacity,
                                    None if alone else self._fair_share())  # fmt: skip
        job.source = launch.source
        plan = launch.plan
        if plan is None or not plan.shape.total().fits_within(free):
            return None
        job.plan = plan  # a shape that cannot run fails in the runner, with its reason
        return plan.shape.total()

    def _fair_share(self) -> FairShare:
        """Who else wants the service's capacity now (the advisor's ``fair`` rule reads it)."""
        return FairShare(self.scheduler.fair_share_cores(FAIR_SHARE_FLOOR_CORES),
                         self.scheduler.wanting(), self.capacity.cpu_cores)  # fmt: skip

    def _predicted_prior(self, spec: JobSpec, policy: Policy) -> tuple[ShapeRecord, ...]:
        """The shapes ``policy`` wants measured before launch, at their profile-predicted
        speed (none for policies that ask for none, or workloads without a profile)."""
        return predicted_records(spec, policy.prior_shapes(spec.budget.resources, self.capacity))

    def _spawn(self, job: QueuedJob) -> None:
        process = self.launcher.launch(job.spec, job.job_id, job.plan, self.books)
        self.runners[job.name] = Runner(job, process)
        fields = {"phase": str(JobPhase.RUNNING)}
        if job.plan is not None:
            fields.update(started_at=time.time(), launch_source=str(job.source),
                          launch_note=job.plan.reason.removeprefix(f"{job.source}: "))  # fmt: skip
            expected = _expected(job.plan, job.spec)
            if expected is not None:
                fields.update(predicted_time_s=expected.time_s, predicted_core_h=expected.core_h,
                              predicted_note=expected.source)  # fmt: skip
        self.store.update(job.job_id, **fields)

    def _reap(self) -> None:
        for name, runner in list(self.runners.items()):
            code = runner.process.poll()
            if code is None:
                continue
            job = runner.job
            self.store.ingest(job.job_id, job.spec.state_path)
            report = runner.process.report()
            if code == 0:
                phase, error = JobPhase.FINISHED, None
            elif runner.cancelled:
                phase, error = JobPhase.CANCELLED, "cancelled"
            else:
                phase, error = JobPhase.FAILED, runner.process.last_lines() or f"exit status {code}"
            self.store.finish(job.job_id, phase, report, error)
            self.scheduler.finish(job)
            del self.runners[name]
            runner.process.release()


def _expected(plan: Plan, spec: JobSpec) -> LaunchPrediction | None:
    """What a launch is predicted to take: at the speed a similar run measured on its shape
    (a history launch), else from the workload's profile."""
    return history.predicted(plan, spec) or predict_launch(spec, plan.shape)


def _trained(spec: JobSpec) -> bool:
    """Whether the job's state file says it finished training."""
    from rightsize.runtime.state import JobStatus, read_job

    job = read_job(spec.state_path)
    return job is not None and job["status"] == str(JobStatus.FINISHED)


def _check_names(spec: JobSpec) -> None:
    """A zoo workload and dataset must exist (a ``module:function`` factory is the runner's
    to load: the service never runs a user's code)."""
    from rightsize.workloads.registry import WorkloadRegistry

    registry = WorkloadRegistry()
    if ":" not in spec.workload:
        names = [m.name for m in registry.models()]
        if spec.workload not in names:
            raise SpecError(f"{unknown_name('workload', spec.workload, names)}", field="workload")
    datasets = registry.dataset_names()
    if spec.dataset is not None and spec.dataset not in datasets:
        raise SpecError(f"{unknown_name('dataset', spec.dataset, datasets)}", field="dataset")
