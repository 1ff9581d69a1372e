"""The job master: launches nodes, serves them, measures them, and carries out plans.

DLRover's Elastic Trainer (§5.1) runs in the job's master: a Pod Watcher
(here: the backend's process exits, cgroup readings and :mod:`liveness`), a
Data Shard Manager (:mod:`shards`), and the elasticity and fault-tolerance
operations (§5.3: :class:`operations.JobOperations`, built from narrow ports, whose
parts are :mod:`lifecycle` and :mod:`elastic`). NEARCHUS's Metric Collector is
:meth:`Master.sample`. The policy is asked through :mod:`control`; the master
decides nothing itself.

The master is the mechanism; what changes while the job runs is one typed
object, :class:`jobstate.JobState` (``master.job``), and its answers to nodes
come from :class:`rpc.NodeService` over the protocol in :mod:`protocol`.
Everything needed to resume — the job, the shape it launched with, the
timeline of shapes, committed checkpoints with their shard queues — is in the
SQLite state file (:mod:`state`), written before the step it allows to resume:
a master started on an unfinished job's state file (whatever the moment its
predecessor died, or after a SIGINT) relaunches the last shape from the latest
checkpoint and carries on. On every way out the backend stops the nodes and
removes their cgroups; if the master itself is killed, the nodes die with it
(parent-death signal) and the next master sweeps the cgroups.
"""

from __future__ import annotations

import math
import signal
import sys
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import zmq

from rightsize.core.errors import ResourceError, RightsizeError
from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape, NodeRole, NodeSpec
from rightsize.core.spec import Backend, JobSpec, ShapeSpec, Strategy
from rightsize.runtime.backends.base import capacity_of, open_backend, quota_sharing
from rightsize.runtime.backends.contract import NodeBackend
from rightsize.runtime.backends.local import Exit, threads_for
from rightsize.runtime.checkpoint import CheckpointDir, checkpoint_root
from rightsize.runtime.clock import Clock, JobClock, SystemClock
from rightsize.runtime.control import Controller, ControlLoop, Schedule, Transition
from rightsize.runtime.curve import JobContext, JobKeys
from rightsize.runtime.errors import (
    ExactlyOnceViolated,
    Interrupted,
    JobFailed,
    JobInterrupted,
    StopRequested,
)
from rightsize.runtime.jobstate import JobState, NodeFailedTooOften, Phase
from rightsize.runtime.lease import CapacityLease, MachineLease
from rightsize.runtime.liveness import (
    MASTER_GAP_S,
    LivenessRule,
    credit_gap,
    has_started,
    silent_nodes,
)
from rightsize.runtime.memory_need import (
    floored_plan,
    memory_need,
    script_need,
    warn_below_floors,
)
from rightsize.runtime.metrics import MetricCollector, progress, read_nodes
from rightsize.runtime.model_io import layout_of
from rightsize.runtime.node_link import build_workload
from rightsize.runtime.nodes import Status, describe_exit
from rightsize.runtime.operations import JobOperations
from rightsize.runtime.ports import JobPorts, Settings
from rightsize.runtime.processes import NodeProcesses
from rightsize.runtime.protocol import Message, Role, Threads
from rightsize.runtime.records import ProgressStatus, TimelineAction, TimelineRow
from rightsize.runtime.report import (
    account,
    build_report,
    script_headline,
    violations,
    workload_headline,
)
from rightsize.runtime.reshape import rejection
from rightsize.runtime.rpc import NodeService
from rightsize.runtime.sample_ledger import SampleLedger
from rightsize.runtime.script_check import check_script
from rightsize.runtime.script_group import saves_regularly
from rightsize.runtime.script_state import ScriptState
from rightsize.runtime.shards import StragglerRule
from rightsize.runtime.startup import (
    Resume,
    check_fits,
    job_identity,
    launch_plan,
    shard_plan,
    unfinished_job,
)
from rightsize.runtime.state import JobStatus, LaunchRow, StateStore
from rightsize.runtime.transport import Counters, Server
from rightsize.scaling.api import (
    Action,
    EventKind,
    MetricSample,
    NodeEvent,
    Plan,
    Policy,
    WorkerRange,
)
from rightsize.scaling.payback import RestartCost

#: Seconds the master serves nodes between checks while it waits for an operation.
WAIT_POLL_S = 0.05
#: Messages handled per pump before timers are checked again.
PUMP_BATCH = 256


class Master:
    """Runs one job to completion. ``run()`` returns the report (see :mod:`report`).

    Args:
        oversubscribe: run a job larger than this machine (``runtime.oversubscribe`` too).
        lease: the capacity the job may grow into (default: this whole machine; the
            service gives each job a lease on its shared capacity, :mod:`lease`).
        launch: the plan a new job starts with, decided by whoever admitted it (the
            service's scheduler); default: the job file's shape or the policy's plan.
    """

    def __init__(
        self,
        spec: JobSpec,
        policy: Policy,
        clock: Clock | None = None,
        fresh: bool = False,
        warn: Callable[[str], None] | None = None,
        on_sample: Callable[[ProgressStatus], None] | None = None,
        oversubscribe: bool = False,
        lease: CapacityLease | None = None,
        launch: Plan | None = None,
    ) -> None:
        self.spec, self.policy, self.fresh = spec, policy, fresh
        self.clock = clock or SystemClock()
        self.warn = warn or (lambda message: print(message, file=sys.stderr))
        self.on_sample = on_sample or (lambda _status: None)
        self.oversubscribe = oversubscribe or spec.runtime.oversubscribe
        self.ckpt = CheckpointDir(checkpoint_root(spec))
        self.log_dir = spec.checkpoint.dir / spec.name / "logs"  # on this host, always
        runtime = spec.runtime
        self.straggler = StragglerRule(runtime.straggler_ratio, runtime.straggler_shard_fraction)
        self.liveness = LivenessRule(runtime.startup_timeout_s, runtime.liveness_timeout_s)
        self.capacity = capacity_of(runtime)  # this machine, or the Ray cluster's nodes
        self.machine = self.capacity.total
        if spec.is_script:  # the user's own script: nothing to build here, no shards
            check_script(spec)
            self.workload, self.sizes, self.need, self.plan = None, {}, script_need(), None
        else:
            self.workload = build_workload(spec)
            layout = layout_of(self.workload.make_model(seed=spec.training.seed))
            self.sizes = layout.sizes
            self.need = memory_need(spec, self.workload, layout)
            self.plan = shard_plan(spec, len(self.workload.dataset))
        self.lease = lease or MachineLease(self.machine)
        self.admitted = launch
        self.job = JobState(self.plan, spec.strategy, dict(self.sizes),
                            script=ScriptState() if spec.is_script else None)  # fmt: skip
        #: names this run's stores and torchrun's TORCHELASTIC_RUN_ID
        self.run_token = uuid.uuid4().hex[:8]
        self.declined: ClusterShape | None = None  # the last plan the payback rule declined
        self.collector = MetricCollector(runtime.ps_bandwidth)
        self.job_clock = JobClock(self.clock)  # its start is the job's (a resumed one's: older)
        self.resumed_from: int | None = None
        self.stop_signal: int | None = None  # set by request_stop (a signal handler)
        self._handling_stop = False
        self._last_pump = self.clock.now()
        # opened by run(), closed on every way out of it
        self.zmq: JobContext | None = None
        #: CURVE keys for the job's sockets (:mod:`curve`): on by default where nodes span hosts
        curve_on = runtime.curve if runtime.curve is not None else runtime.backend == Backend.RAY
        self.keys = JobKeys.generate() if curve_on else None
        self.store: StateStore | None = None
        self.backend: NodeBackend | None = None
        self.server: Server | None = None
        self.service: NodeService | None = None
        self.processes: NodeProcesses | None = None
        self.ops: JobOperations | None = None  # what the job's operations do, over ports

    # -- the whole job ----------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        """Train the job to its end (or resume it) and return its report.

        Raises:
            SpecError, ResourceError: the job cannot run as written (before anything starts).
            JobFailed: a node kept failing or never started.
            JobInterrupted: a signal stopped it (a rerun resumes).
            ExactlyOnceViolated: training ended but the servers' logs show samples missing
                or applied twice (the report is attached).
        """
        resume, launch = self._prepare()
        try:
            self._open()
            if resume is not None:
                self._resume(resume)
            else:
                self._start(launch)
            self._train()
            report = self._report()
            self.store.update_job(status=str(JobStatus.FINISHED), finished_s=self.time_s())
        except NodeFailedTooOften as exc:
            self._fail()
            raise JobFailed(f"{exc}; its log: {self.log_dir / exc.node}.log") from None
        except JobInterrupted:
            raise
        except StopRequested:
            raise self._interrupt() from None
        except RightsizeError:
            self._fail()
            raise
        finally:
            self._close()
        problems = violations(report)
        if problems:
            raise ExactlyOnceViolated("exactly-once check failed: " + "; ".join(problems), report)
        return report

    def _train(self) -> None:
        controller = Controller(self.spec.name, self.policy, self.spec.budget.resources,
                                self.free, self.steps_total, self.machine,
                                self.applied_plans(), self.time_s(),
                                worker_range=self.worker_range)  # fmt: skip
        # a script checkpoints itself: the master never asks it to
        interval = math.inf if self.spec.is_script else self.spec.checkpoint.interval_s
        schedule = Schedule(self.clock.now(), self.spec.runtime.metric_interval_s, interval)
        loop = ControlLoop(controller, self, self.clock, schedule, self.started_at)
        self.sample()  # the first reading: rates need two
        loop.run()
        while not self._finish():
            loop.step()  # recovers the node that died and relaunches the stopped ones
            loop.run()

    def _prepare(self) -> tuple[Resume | None, Plan | None]:
        """Everything a user's mistake can fail, before anything is written or launched.

        Returns:
            The unfinished job to resume (or None), and the launch plan of a new one.
        """
        resume = None if self.fresh else unfinished_job(self.spec)
        launch = None if resume else self._launch_plan()
        shape = resume.shape if resume else launch.shape
        check_fits(self.spec, shape, self.capacity, self.oversubscribe)
        refused = self.lease.reserve(shape.total(), len(shape.nodes))
        if refused:
            raise ResourceError(f"the job cannot start now: {refused}")
        return resume, launch

    def _open(self) -> None:
        self.zmq = JobContext().secure(self.keys)
        self.store = StateStore(self.spec.state_path)
        self.backend = open_backend(self.spec.runtime, self.log_dir, self.warn,
                                    quota_sharing(self.spec))  # fmt: skip
        self.server = Server(self.zmq, Counters(), host=self.backend.bind_host)
        spec_json = self.spec.model_dump(mode="json", by_alias=True)
        self.service = NodeService(self.job, spec_json, self.threads, self.straggler, self.clock,
                                   self.store.save_ledger)  # fmt: skip
        self.processes = NodeProcesses(self.backend, self.server.address, self.keys,
                                       self.job.nodes, self.clock, self._role,
                                       self.collector.forget)  # fmt: skip
        ports = JobPorts(self.job, self.processes, self, self.store, self.ckpt, self.job_clock,
                         self.lease, self._settings())  # fmt: skip
        self.ops = JobOperations(ports)

    def _settings(self) -> Settings:
        spec, runtime = self.spec, self.spec.runtime
        return Settings(spec.name, spec.budget.resources, self.machine, self.worker_range,
                        runtime.startup_timeout_s, runtime.max_restarts, runtime.startup_allowance,
                        self.log_dir, self.run_token, spec.script)  # fmt: skip

    @property
    def started_at(self) -> float:
        """When the job started (a resumed job: when its first master did)."""
        return self.job_clock.started_at

    @started_at.setter
    def started_at(self, value: float) -> None:
        self.job_clock.started_at = value

    def _start(self, plan: Plan) -> None:
        self.started_at = self.clock.now()
        spec_json = self.spec.model_dump(mode="json", by_alias=True)
        row = LaunchRow(plan.shape, str(plan.action), plan.reason, plan.details)
        seq = self.store.start_job(self.spec.name, spec_json, job_identity(self.spec),
                                   self.started_at, row)  # fmt: skip
        self.store.update_job(isolation=str(self.backend.mode))
        self.ckpt.prune(keep=set())
        t0 = self.clock.now()
        note = self.ops.launch_job(plan.shape, None)
        details = {"nodes": len(plan.shape.nodes)}
        self.store.set_transition(seq, self.clock.now() - t0, details, plan.reason + note)

    def _resume(self, resume: Resume) -> None:
        job = resume.job
        self.started_at = job["started_at"]
        self.store.update_job(masters=job["masters"] + 1, isolation=str(self.backend.mode),
                              status=str(JobStatus.RUNNING))  # fmt: skip
        if self.job.script is not None:  # which of the script's files hold which samples
            self.job.script.resumed(SampleLedger.from_dict(self.store.ledger()))
        row = self.store.latest_checkpoint()
        self.job.resumed(job["generation"], max(self.store.checkpoint_versions(), default=0),
                         row.shards if row else None)  # fmt: skip
        self.resumed_from = row.version if row else 0
        where = f"checkpoint v{row.version}" if row else "the start (no checkpoint yet)"
        t0 = self.clock.now()
        note = self.ops.launch_job(resume.shape, row)
        why = "master restarted" if resume.status == JobStatus.RUNNING else f"{resume.status} job rerun"
        self.ops.record(TimelineAction.RESUME, f"{why}; resuming from {where}{note}", t0,
                        nodes=len(resume.shape.nodes))  # fmt: skip

    def _launch_plan(self) -> Plan:
        plan = self.admitted or launch_plan(self.spec, self.policy, self.machine)
        if isinstance(self.spec.initial_shape, ShapeSpec):
            warn_below_floors(plan.shape, self.need, self.warn)  # the user's own numbers
            return plan
        floored = floored_plan(plan, self.need)
        why = rejection(floored.shape, self.spec.budget.resources, self.spec.strategy)
        if why:
            raise ResourceError(f"the launch shape with each node's memory floor "
                                f"({floored.shape.describe()}) cannot run: {why}")  # fmt: skip
        return floored

    def _report(self) -> dict[str, Any]:
        """The job's report (:mod:`report`), from the state file and the job's state."""
        spec, job = self.spec, self.job
        samples = self.store.samples()
        if job.script is not None:
            headline = script_headline(job.script, job.nodes.by_name.values(),
                                       self.ops.steps_done(), job.epoch, spec.script,
                                       spec.args)  # fmt: skip
        else:
            accounting = account(self.store.latest_checkpoint(), self.plan, job.shards)
            headline = workload_headline(self.workload.dataset.name, job.shards, accounting)
        return build_report(
            job=spec.name, workload=spec.program, strategy=str(spec.strategy),
            policy=self.policy.name, isolation=str(self.backend.mode), wall_time_s=self.time_s(),
            headline=headline, final_shape=job.shape.to_dict(), timeline=self.store.timeline(),
            samples=samples, masters=self.store.job()["masters"],
            node_restarts=job.restarts, events=self.store.events(),
        )  # fmt: skip

    def applied_plans(self) -> list[Plan]:
        """The plans the timeline says were applied (launch included), for the policy."""
        rows = [TimelineRow.from_json(row) for row in self.store.timeline()]
        return [Plan(ClusterShape.from_dict(row.shape), row.action, row.reason, row.notes)
                for row in rows if row.applied and isinstance(row.action, Action)]  # fmt: skip

    def _fail(self) -> None:
        if self.job.live:
            self.job.move_to(Phase.FAILED)
        if self.store is not None:
            self.store.update_job(status=str(JobStatus.FAILED))

    def _close(self) -> None:
        if self.processes is not None:
            self.processes.close()
        if self.backend is not None:
            self.backend.close()
        if self.server is not None:
            self.server.close()
        if self.zmq is not None:
            self.zmq.destroy(linger=0)
        if self.store is not None:
            self.store.close()

    # -- signals ------------------------------------------------------------------------
    def request_stop(self, signum: int) -> None:
        """Ask the job to stop (from a signal handler): it checkpoints, then ``run`` raises
        :class:`JobInterrupted`. A second request while the first is handled ends at once."""
        if self.stop_signal is not None:
            raise KeyboardInterrupt
        self.stop_signal = signum

    def _interrupt(self) -> JobInterrupted:
        """Take a checkpoint if the job is training with every server up, stop, and say so."""
        self._handling_stop = True
        name = signal.Signals(self.stop_signal).name
        if self.job.script is not None:
            return self._interrupt_script(name)
        version = None
        if self.job.phase == Phase.TRAINING and not self.job.failures:
            try:
                version = self.ops.checkpoint()
            except (Interrupted, JobFailed):
                version = None
        saved = f"checkpoint v{version} saved" if version else "no checkpoint could be taken now"
        row = self.store.latest_checkpoint()
        resume = f"checkpoint v{row.version}" if row else "the start"
        reason = f"stopped by {name}; {saved}"
        self.ops.record_not_applied(TimelineAction.INTERRUPT, reason, self.job.shape)
        self.job.move_to(Phase.INTERRUPTED)
        self.store.update_job(status=str(JobStatus.INTERRUPTED))
        return JobInterrupted(
            f"interrupted by {name}; {saved}; rerun the same command to resume from {resume}",
            self.stop_signal,
        )  # fmt: skip

    def _interrupt_script(self, name: str) -> JobInterrupted:
        """The signal goes to every rank, as torchrun passes it on; ranks still running after
        the grace are killed. The script's own checkpoint is what a rerun resumes from."""
        ranks = self.job.nodes.alive(NodeRole.WORKER)
        for node in ranks:
            node.mark_stopping()
            self.processes.signal(node.name, self.stop_signal)
        try:
            self.ops.wait_ended()
        except Interrupted:
            pass  # a rank had failed meanwhile: every rank is stopped all the same
        self.ops.record_not_applied(TimelineAction.INTERRUPT,
                                    f"stopped by {name}; the ranks were sent {name}",
                                    self.job.shape)  # fmt: skip
        self.job.move_to(Phase.INTERRUPTED)
        self.store.update_job(status=str(JobStatus.INTERRUPTED))
        return JobInterrupted(
            f"interrupted by {name}; every rank was sent {name}; rerun the same command to "
            "resume (the script restarts from its own checkpoint)", self.stop_signal,
        )  # fmt: skip

    # -- nodes ----------------------------------------------------------------------
    def _role(self, node: NodeSpec) -> Role:
        if node.role == NodeRole.PS:
            return Role.PS
        if self.spec.strategy == Strategy.PS:
            return Role.WORKER
        return Role.SCRIPT if self.spec.is_script else Role.RANK

    def wait_until(self, predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
        """Serve nodes until ``predicate()``; a node's death or a stop request interrupts.

        Raises:
            StopRequested: a signal asked the job to stop.
            Interrupted: a node of the shape died meanwhile.
            JobFailed: ``timeout_s`` passed.
        """
        deadline = self.clock.now() + timeout_s
        while not predicate():
            if self.stop_signal is not None and not self._handling_stop:
                raise StopRequested(what)
            if self.job.failures:
                raise Interrupted(what)
            if self.clock.now() > deadline:
                raise JobFailed(f"{what} did not happen within {timeout_s:g}s; "
                                f"node logs are in {self.log_dir}")  # fmt: skip
            self.pump(WAIT_POLL_S)

    def free(self, shape: ClusterShape) -> Resources:
        """What the job could hold beyond ``shape``: its lease's answer."""
        return self.lease.free(shape)

    def time_s(self) -> float:
        return self.job_clock.time_s()

    def threads(self, node: NodeSpec) -> int:
        return threads_for(node.resources.cpu_cores, self.backend.host_cpus)

    # -- the mechanism the control loop drives ------------------------------------------
    @property
    def shape(self) -> ClusterShape:
        return self.job.shape

    def pump(self, timeout_s: float) -> None:
        """Answer the nodes' messages for up to ``timeout_s``, then notice exits and silences."""
        gap = self.clock.now() - self._last_pump
        if gap > MASTER_GAP_S:  # the master itself was not running: nobody could be heard
            credit_gap(self.job.nodes.alive(), gap)
        socket = self.server.socket
        if socket.poll(int(max(0.0, timeout_s) * 1000), zmq.POLLIN):
            for _ in range(PUMP_BATCH):
                if not socket.poll(0, zmq.POLLIN):
                    break
                identity, header, _tensors = self.server.receive()
                reply, out = self.service.handle(Message.from_header(header))
                self.server.reply(identity, {**reply.to_header(), "rid": header.get("rid")}, out)
        for exit_ in self.backend.exits():
            self._on_exit(exit_)
        self._check_liveness()
        self.settle_started()
        self._last_pump = self.clock.now()

    def _on_exit(self, exit_: Exit) -> None:
        node = self.job.nodes.get(exit_.name)
        if node is None:
            return
        stopping = node.status == Status.STOPPING
        node.move_to(Status.DEAD)
        script = self.job.script
        if script is not None and not stopping:
            done_before = bool(script.done)
            script.rank_exited(exit_.name, exit_.returncode)
            if exit_.returncode == 0 and not exit_.oom_killed:
                self.backend.note(exit_.name, f"{exit_.name} ended: the script exited 0")
                return  # this rank's part is done
            if done_before:  # the group had finished: this rank failed on its way out
                script.rank_ended_late(exit_.name, describe_exit(exit_, node))
                self.backend.note(exit_.name, f"{exit_.name} ended after the script finished "
                                  f"on another rank: {script.ended_late[exit_.name]}; not "
                                  "restarted")  # fmt: skip
                return
            self.ops.check_started(exit_, node, resumed=bool(self.resumed_from))
        if not stopping:  # nobody asked it to end: a failure
            self.job.failed(exit_)

    def settle_started(self) -> None:
        """Nodes that started with borrowed CPU and now train get their planned quota."""
        for node in self.job.nodes.alive():
            if node.startup is not None and has_started(node):
                node.resized(node.spec)
                threads = self.backend.resize(node.name, node.spec.resources)
                node.commands.append(Threads(threads))

    def _check_liveness(self) -> None:
        steps = [n.step_s for n in self.job.nodes.running(NodeRole.WORKER) if n.step_s]
        for node, silent_s in silent_nodes(self.job.nodes.alive(), self.clock.now(),
                                           self.liveness, steps):  # fmt: skip
            if node.unresponsive_s is None:
                node.given_up(silent_s)
                self.backend.signal(node.name, signal.SIGKILL)  # its exit is a failure

    def _finish(self) -> bool:
        """Stop the nodes and take the final checkpoint. False when a node died after the
        loop's last turn or on the way out (a PS killed as training ends loses the updates
        since the last checkpoint): the job then recovers and trains what was lost."""
        if self.stop_signal is not None:
            raise StopRequested("the end of training")
        if self.job.failures:
            return False
        try:
            self.ops.finish()
        except StopRequested:
            raise
        except Interrupted:
            self.job.move_to(Phase.TRAINING)
            return False
        return True

    def failures(self) -> list[NodeEvent]:
        events = []
        for exit_ in self.job.take_failures():
            node = self.job.nodes.get(exit_.name)
            kind = EventKind.OOM_KILLED if exit_.oom_killed else EventKind.FAILED
            detail = describe_exit(exit_, node)
            self.backend.note(exit_.name, f"{exit_.name} ended: {detail}")
            events.append(NodeEvent(self.time_s(), exit_.name, kind, detail))
            self.store.record_event(self.time_s(), exit_.name, str(kind), detail)
            self.job.failure_reported(exit_.name, detail)
        return events

    def recover(self) -> None:
        if self.job.failures:
            # A death not reported yet (it came while a plan was applied): the policy and the
            # OOM safety net hear of it on the next turn, before anything is relaunched —
            # relaunched now, an OOM-killed node would come back at the memory that killed it
            # and its restart would not be counted.
            return
        try:
            self.ops.recover()
        except StopRequested:
            raise
        except Interrupted:
            pass  # another node died meanwhile: the next turn of the loop recovers again

    def apply(self, plan: Plan) -> Transition:
        try:
            return self.ops.apply_plan(floored_plan(plan, self.need))
        finally:  # what the job holds now, applied or not: a reservation not used goes back
            self.lease.settle(self.job.shape.total(), len(self.job.shape.nodes))

    def checkpoint(self) -> None:
        try:
            self.ops.checkpoint()
        except StopRequested:
            raise
        except Interrupted:
            pass  # the failure is handled next; the half-written version is never committed

    def finished(self) -> bool:
        """Training is over — or a signal asked it to stop (``run`` tells which)."""
        if self.stop_signal is not None:
            return True
        if self.job.script is not None:
            return self.job.script.finished(self.job.shape)
        return self.job.shards.finished

    def steps_done(self) -> int:
        """Batches trained (summed over workers); a script's optimizer steps (its groups')."""
        return self.ops.steps_done()

    @property
    def worker_range(self) -> WorkerRange:
        return WorkerRange(self.spec.policy.min_workers, self.spec.policy.max_workers)

    @property
    def steps_total(self) -> int | None:
        """The job's length in :meth:`steps_done`'s unit, if known (a script decides its own:
        its ``steps`` hint is the payback rule's, :meth:`restart_cost`)."""
        return None if self.plan is None else self.plan.steps_total

    def restart_cost(self, plan: Plan) -> RestartCost | None:
        """What carrying out ``plan`` costs in restarts: for a script whose world size the plan
        changes, the measured cost of its last restart (or launch), the training a stop would
        throw away, and its steps left if its length is known; None for any other plan."""
        script = self.job.script
        if (script is None or not self.spec.runtime.restart_payback
                or plan.shape.n_workers == self.job.shape.n_workers):  # fmt: skip
            return None
        cost = script.restart_cost()
        if cost is None:
            return None
        lost = 0.0 if saves_regularly(script) else self.ops.unsaved_s()
        left = None if self.spec.steps is None else max(0, self.spec.steps - self.steps_done())
        return replace(cost, lost_s=lost, steps_left=left)

    def decline(self, plan: Plan, why: str) -> None:
        """A plan the payback rule turned down: in the timeline once per shape asked for."""
        if plan.shape != self.declined:
            self.declined = plan.shape
            self.ops.record_not_applied(str(plan.action), f"{plan.reason} (not taken: {why})",
                                        plan.shape)  # fmt: skip

    def sample(self) -> MetricSample | None:
        now = self.time_s()
        sample = self.collector.collect(
            now, read_nodes(self.job, self.backend, now, self.started_at)
        )
        self.ops.settle_group()
        if sample is None:
            return None
        for m in sample.role(NodeRole.WORKER):
            self.job.record_speed(m.name, m.steps_per_s)
        status = progress(sample, self.job, self.steps_done(), self.steps_total,
                          self.collector.loss)  # fmt: skip
        self.store.record_sample(now, status.to_json())
        self.on_sample(status)
        return sample
