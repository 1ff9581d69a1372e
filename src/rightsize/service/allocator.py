"""The service's scheduler: real jobs through the queues the simulator uses.

NEARCHUS §IV: submitted jobs wait in the *waiting queue*; the Resource Allocator
moves a job to the *running queue* and launches it once its policy's launch plan fits
what is free (``R0`` of the budget for NEARCHUS and Optimus, the whole shape for
FA-BF); a job that ends moves to the *finished queue*. The queues and the books are
cluster/scheduler.py's :class:`Scheduler` — the very object the simulator drives —
and this module drives it with real jobs: each admitted job runs in a runner process
(:mod:`runner`) that asks the scheduler's books before it grows (:mod:`lease`), so
the sum of what running jobs hold never exceeds the capacity, growth included.

One thread turns the loop every ``poll_s``: admit, reap runners that ended, copy
running jobs' state files into the store. The lease threads and the API's calls
(submit, cancel) take the same lock. A service killed at any moment leaves running
jobs marked running in the store; the next service on the same store queues them
first, with what they last held, and their masters resume from their checkpoints.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path

from rightsize.cluster.scheduler import Scheduler
from rightsize.core.errors import RightsizeError, SpecError, unknown_name
from rightsize.core.resources import Resources
from rightsize.core.shape import rounding_slack
from rightsize.core.spec import JobSpec, ShapeSpec
from rightsize.planning.local import (
    LaunchPrediction,
    predict_launch,
    predicted_records,
    samples_of,
)
from rightsize.runtime.state import read_shape
from rightsize.scaling.api import Action, LaunchRequest, Plan, Policy, ShapeRecord
from rightsize.scaling.launch import INITIAL_SHAPE_REASON, launch_plan
from rightsize.scaling.registry import make_policy, require_strategy
from rightsize.service import history
from rightsize.service.host import held_beside
from rightsize.service.lease import serve_lease
from rightsize.service.models import JobPhase, Source
from rightsize.service.schemas import JobView, LaunchPreview, RunSummary
from rightsize.service.store import Store
from rightsize.service.uploads import Uploads, runner_cgroup

#: The node count assumed for a lease request that does not say its shape's (the runtime's
#: master sends totals alone): five nodes' rounding, the 0.005 core the books always allowed.
UNCOUNTED_NODES = 5
#: The least CPU a fair share offers a launching job: a parameter server and a worker of
#: half a core each, the smallest shape DLRover samples at.
FAIR_SHARE_FLOOR_CORES = 1.0
#: Seconds the loop waits after a submission for the next one before it admits, and the most
#: it waits so in all: jobs submitted together arrive milliseconds apart, and a fair share
#: counts only the jobs it can see (the first would otherwise take the whole budget alone).
GATHER_S, GATHER_MAX_S = 0.3, 2.0
#: Seconds between copies of a running job's state file into the store.
INGEST_EVERY_S = 2.0
#: Seconds a runner gets to checkpoint and stop when the service shuts down.
STOP_GRACE_S = 60.0
#: Lines of a failed runner's log kept as the job's error.
ERROR_LINES = 3


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
    source: str = "policy"  # the launch plan's source: history, prediction, policy or job file
    history: list[tuple[RunSummary, ShapeRecord]] | None = None  # read once, at first try
    policy: Policy | None = None  # the launch rule's policy, built at the first try
    predicted: tuple[ShapeRecord, ...] | None = None  # its prior shapes at predicted speeds


@dataclass(eq=False)
class Runner:
    job: QueuedJob
    popen: subprocess.Popen
    log: Path
    report: Path
    cancelled: bool = False
    ingested_at: float = field(default=0.0)
    cgroup: object | None = None  # the runner's own, for a job that runs uploaded code


def policy_of(spec: JobSpec) -> Policy:
    """The job's policy as the job file names it (the runner builds its own alike)."""
    return require_strategy(make_policy(spec.policy.name, spec.runtime.metric_interval_s,
                                       **spec.policy.params), spec.strategy)


class LaunchShare(StrEnum):
    """What a job launched by its policy (no ``initial_shape``, no history) may start with.

    ``free``: its whole budget, if that much is free (NEARCHUS §IV's allocator: the first
    of four jobs each budgeted the machine takes all of it, and the rest wait). ``fair``:
    while other jobs run or wait, at most an even split of the capacity among every job that
    wants to run (at least :data:`FAIR_SHARE_FLOOR_CORES`), so that a batch submitted
    together starts side by side; the job's budget is unchanged, and it grows into what
    the others leave once no one waits (docs/service.md).
    """

    FREE = "free"
    FAIR = "fair"


class Allocator:
    """Admits, launches, watches and cancels the service's jobs over ``capacity``.

    Args:
        store: where jobs and their runs are kept.
        capacity: what all running jobs together may hold (the machine, or a share).
        workdir: each job's checkpoints, state file, report and log go to ``workdir/jobs/ID``.
        order: ``fcfs`` or ``sjf``.
        launch_share: how much of the capacity a policy's launch may take (:class:`LaunchShare`).
    """

    def __init__(self, store: Store, capacity: Resources, workdir: Path, order: str = "fcfs",
                 poll_s: float = 1.0,
                 beside: Callable[[set[int]], Resources] = held_beside,
                 launch_share: LaunchShare = LaunchShare.FAIR) -> None:  # fmt: skip
        self.store, self.capacity, self.workdir, self.poll_s = store, capacity, workdir, poll_s
        self.launch_share = LaunchShare(launch_share)
        self.beside = beside  # what other rightsize jobs on the host hold (service/host.py)
        self.uploads = Uploads(workdir / "uploads")
        self.scheduler: Scheduler[QueuedJob] = Scheduler(capacity, order)
        self.lock = threading.RLock()
        self.runners: dict[str, Runner] = {}
        self._wake = threading.Event()
        self._submitted = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._refused: list[tuple[QueuedJob, RightsizeError]] = []  # this turn's, by admission

    # -- the lease books (lease.Books) ----------------------------------------------------
    def held(self, job: str) -> Resources:
        with self.lock:
            return self.scheduler.held(job)

    def free_beyond(self, job: str, total: Resources) -> Resources:
        with self.lock:
            held, free = self.held(job), self.scheduler.free_for_running()
            return Resources(
                free.cpu_cores + max(0.0, held.cpu_cores - total.cpu_cores),
                free.memory_bytes + max(0, held.memory_bytes - total.memory_bytes),
            )

    def reserve(self, job: str, total: Resources, nodes: int | None = None) -> str | None:
        slack = rounding_slack(UNCOUNTED_NODES if nodes is None else nodes)
        with self.lock:
            if not self.scheduler.holds(job):
                return "the job is not running under this service"
            held, free = self.held(job), self.scheduler.free_for_running()
            grow = Resources(max(0.0, total.cpu_cores - held.cpu_cores),
                             max(0, total.memory_bytes - held.memory_bytes))  # fmt: skip
            if (grow.cpu_cores > free.cpu_cores + slack
                    or grow.memory_bytes > free.memory_bytes):  # fmt: skip
                waiting = (
                    f"; {len(self.scheduler.waiting)} job(s) wait" if self.scheduler.waiting else ""
                )
                return (f"the service's capacity: the job needs {grow} more but {free} is free "
                        f"to grow into{waiting}")  # fmt: skip
            larger = Resources(max(held.cpu_cores, total.cpu_cores),
                               max(held.memory_bytes, total.memory_bytes))  # fmt: skip
            self.scheduler.allocate(job, larger, slack)
            return None

    def settle(self, job: str, total: Resources, nodes: int | None = None) -> None:
        slack = rounding_slack(UNCOUNTED_NODES if nodes is None else nodes)
        with self.lock:
            held = self.held(job)
            if self.scheduler.holds(job) and total.fits_within(held + Resources(slack)):
                self.scheduler.allocate(job, total, slack)

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
            policy = policy_of(spec)
        except RightsizeError as exc:
            raise SpecError(str(exc), field="policy") from None
        if not isinstance(spec.initial_shape, ShapeSpec):
            try:  # the policy's launch on an empty service: a budget it cannot start in fails now
                prior = self._predicted_prior(spec, policy)
                policy.launch_plan(LaunchRequest(spec.name, budget, self.capacity, prior,
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
            source=probe.source, shape=plan.shape.to_dict(), shape_text=plan.shape.describe(),
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
                runner.popen.send_signal(signal.SIGTERM)
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
        """SIGTERM every runner and wait for it — from the thread that started them: a runner
        dies with that thread (its parent-death signal), so it must outlive them."""
        with self.lock:
            runners = list(self.runners.values())
        for runner in runners:
            runner.popen.send_signal(signal.SIGTERM)
        for runner in runners:
            try:
                runner.popen.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                runner.popen.kill()
                runner.popen.wait()
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
            started = self.scheduler.admit(self._admission, rounding_slack(UNCOUNTED_NODES))
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
        outside = self.beside({runner.popen.pid for runner in self.runners.values()})
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
        if isinstance(spec.initial_shape, ShapeSpec):
            shape = spec.initial_shape.to_shape()
            plan, job.source = Plan(shape, Action.LAUNCH, INITIAL_SHAPE_REASON), "job file"
        else:
            if job.history is None:
                job.history = self._history(spec)
            if job.policy is None:  # built once: admission is retried every turn
                job.policy = policy_of(spec)
            plan, job.source = self._from_history(job, free), "history"
            if plan is None and not self._waits_for_history(job):
                if job.predicted is None:
                    job.predicted = self._predicted_prior(spec, job.policy)
                prior = tuple(record for _, record in job.history) or job.predicted
                request = LaunchRequest(
                    spec.name, spec.budget.resources, free, prior, self.capacity
                )
                source = "policy" if job.history or not job.predicted else "prediction"
                plan, job.source = self._policy_launch(job.policy, request, alone), source
        if plan is None or not plan.shape.total().fits_within(free):
            return None
        job.plan = plan  # a shape that cannot run fails in the runner, with its reason
        return plan.shape.total()

    def _policy_launch(self, policy: Policy, request: LaunchRequest,
                       alone: bool = False) -> Plan | None:  # fmt: skip
        """The policy's launch plan, within the job's fair share of the capacity while others
        want to run too (:class:`LaunchShare`; not ``alone``, as on an empty service); with
        its whole budget where the policy cannot start within the share at all (NEARCHUS
        needs 2 CPU to plan from)."""
        budget = request.budget
        share = self.scheduler.fair_share_cores(FAIR_SHARE_FLOOR_CORES)
        if alone or self.launch_share != LaunchShare.FAIR or share >= budget.cpu_cores:
            return launch_plan(policy, request)
        within = replace(request, budget=Resources(share, budget.memory_bytes, budget.gpus))
        try:
            plan = launch_plan(policy, within)
        except RightsizeError:  # it cannot plan within the share: its own budget, as ever
            return launch_plan(policy, request)
        wanting = self.scheduler.wanting()
        return plan and replace(plan, reason=(
            f"{plan.reason}; within a fair share of {share:g} cpu ({wanting} jobs want the "
            f"service's {self.capacity.cpu_cores:g} cpu)"))  # fmt: skip

    def _from_history(self, job: QueuedJob, free: Resources) -> Plan | None:
        """The fastest shape similar runs measured (DLRover §4.3), as the job's policy would
        start there: a policy that plans from such records (DLRover, goodput, FA-BF) is
        asked, and where it chooses the same shape its plan keeps its own notes — so that
        it takes the shape as its starting point (DLRover: its adjusting stage) instead of
        sampling it away. None: no history, or its shape does not fit ``free``."""
        fitted = history.launch_plan(job.history, job.spec.budget.resources, free)
        if fitted is None or job.policy is None:
            return fitted
        records = tuple(record for _, record in job.history)
        own = job.policy.launch_plan(LaunchRequest(job.spec.name, job.spec.budget.resources,
                                                   free, records, self.capacity))  # fmt: skip
        if own is None or own.shape != fitted.shape:
            return fitted  # a policy that ignores history: the service starts it there anyway
        return Plan(fitted.shape, Action.LAUNCH, fitted.reason, {**own.details, **fitted.details})

    def _predicted_prior(self, spec: JobSpec, policy: Policy) -> tuple[ShapeRecord, ...]:
        """The shapes ``policy`` wants measured before launch, at their profile-predicted
        speed (none for policies that ask for none, or workloads without a profile)."""
        return predicted_records(spec, policy.prior_shapes(spec.budget.resources, self.capacity))

    def _history(self, spec: JobSpec) -> list[tuple[RunSummary, ShapeRecord]]:
        return history.found(self.store, spec)

    def _waits_for_history(self, job: QueuedJob) -> bool:
        """Whether a job with history waits for its history's shape to fit (FCFS: the queue
        waits too) — not when it has none, or the shape could never fit: its policy plans."""
        fitted = history.launch_plan(job.history, job.spec.budget.resources, self.capacity)
        return fitted is not None

    def _spawn(self, job: QueuedJob) -> None:
        home = job.spec.checkpoint.dir
        home.mkdir(parents=True, exist_ok=True)
        job_file, log, report = home / "job.json", home / "runner.log", home / "report.json"
        job_file.write_text(json.dumps(job.spec.model_dump(mode="json", by_alias=True)))
        argv = [sys.executable, "-m", "rightsize.service.runner", "--job", str(job_file),
                "--report", str(report), "--parent", str(os.getpid())]  # fmt: skip
        if job.plan is not None:
            launch = home / "launch.json"
            launch.write_text(json.dumps(job.plan.to_json()))
            argv += ["--launch", str(launch)]
        env, join, cgroup = os.environ.copy(), None, None
        folder = None if job.spec.is_script else self.uploads.folder_of(job.spec.workload)
        if folder is not None:  # the owner's uploads on its path, and the runner in a cgroup
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(folder),
                                                              env.get("PYTHONPATH")]))  # fmt: skip
            cgroup = runner_cgroup(f"job-{job.job_id}", job.spec.budget.resources)
            join = _joiner(cgroup.procs_files)
        ours, theirs = socket.socketpair()
        argv += ["--lease-fd", str(theirs.fileno())]
        with open(log, "ab") as out:
            popen = subprocess.Popen(argv, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                                     stdout=out, stderr=subprocess.STDOUT, env=env,
                                     preexec_fn=join)  # fmt: skip
        theirs.close()
        serve_lease(ours, job.name, self)
        self.runners[job.name] = Runner(job, popen, log, report, cgroup=cgroup)
        fields = {"phase": str(JobPhase.RUNNING)}
        if job.plan is not None:
            fields.update(started_at=time.time(), launch_source=job.source,
                          launch_note=job.plan.reason.removeprefix(f"{job.source}: "))  # fmt: skip
            expected = _expected(job.plan, job.spec)
            if expected is not None:
                fields.update(predicted_time_s=expected.time_s, predicted_core_h=expected.core_h,
                              predicted_note=expected.source)  # fmt: skip
        self.store.update(job.job_id, **fields)

    def _reap(self) -> None:
        for name, runner in list(self.runners.items()):
            code = runner.popen.poll()
            if code is None:
                continue
            job = runner.job
            self.store.ingest(job.job_id, job.spec.state_path)
            report = json.loads(runner.report.read_text()) if runner.report.exists() else None
            if code == 0:
                phase, error = JobPhase.FINISHED, None
            elif runner.cancelled:
                phase, error = JobPhase.CANCELLED, "cancelled"
            else:
                phase, error = JobPhase.FAILED, _last_lines(runner.log) or f"exit status {code}"
            self.store.finish(job.job_id, phase, report, error)
            self.scheduler.finish(job)
            del self.runners[name]
            if runner.cgroup is not None:
                try:
                    runner.cgroup.remove()
                except OSError:
                    pass  # a process still in it: the next service's sweep removes it


def _expected(plan: Plan, spec: JobSpec) -> LaunchPrediction | None:
    """What a launch is predicted to take: at the speed a similar run measured on its shape
    (a history launch), else from the workload's profile."""
    return history.predicted(plan, spec) or predict_launch(spec, plan.shape)


def _joiner(procs_files: list[Path]):
    """What a child runs before it executes: it writes itself into the cgroup first, so none
    of its code runs outside it."""

    def join() -> None:
        for path in procs_files:
            path.write_text(str(os.getpid()))

    return join


def _trained(spec: JobSpec) -> bool:
    """Whether the job's state file says it finished training."""
    from rightsize.runtime.state import JobStatus, read_job

    job = read_job(spec.state_path)
    return job is not None and job["status"] == str(JobStatus.FINISHED)


def _last_lines(log: Path) -> str:
    if not log.exists():
        return ""
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return "\n".join(lines[-ERROR_LINES:])


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
