"""The job master: launches nodes, serves them, measures them, and carries out plans.

DLRover's Elastic Trainer (§5.1) runs in the job's master: a Pod Watcher
(here: the backend's process exits and cgroup readings), a Data Shard Manager
(:mod:`shards`), and the elasticity and fault-tolerance operations (§5.3, in
:mod:`elastic`). NEARCHUS's Metric Collector is :meth:`Master.sample`. The
policy is asked through :mod:`control`; the master decides nothing itself.

Nodes talk to the master over one ZeroMQ ROUTER socket; every request is
answered at once, and commands travel in the answers. Everything needed to
resume — the job, the timeline of shapes, committed checkpoints with their
shard queues — is in the SQLite state file (:mod:`state`): a master started on
an unfinished job's state file relaunches the last shape from the latest
checkpoint and carries on. On every way out (success, error, Ctrl-C) the
backend stops the nodes and removes their cgroups; if the master itself is
killed, the nodes die with it (parent-death signal) and the next master
sweeps the cgroups.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Callable
from typing import Any

import zmq

from rightsize.core.errors import ResourceError, RightsizeError, SpecError
from rightsize.core.shape import ClusterShape, NodeRole, NodeSpec
from rightsize.core.spec import JobSpec, ShapeSpec, Strategy
from rightsize.runtime import elastic, lifecycle
from rightsize.runtime.backends.local import Exit, LocalBackend, machine_resources, threads_for
from rightsize.runtime.checkpoint import CheckpointDir, check_writable
from rightsize.runtime.clock import Clock, SystemClock
from rightsize.runtime.control import Controller, ControlLoop, Schedule, Transition
from rightsize.runtime.errors import Interrupted, JobFailed
from rightsize.runtime.metrics import MetricCollector, Reading
from rightsize.runtime.model_io import layout_of
from rightsize.runtime.node import build_workload
from rightsize.runtime.nodes import Nodes, NodeState, Status
from rightsize.runtime.reshape import rejection
from rightsize.runtime.shards import DEFAULT_SHARD_BATCHES, ShardManager, ShardPlan, StragglerRule
from rightsize.runtime.state import StateStore
from rightsize.runtime.transport import Counters, Server
from rightsize.scaling.api import (
    Action,
    EventKind,
    LaunchRequest,
    MetricSample,
    NodeEvent,
    Plan,
    Policy,
)

#: Seconds the master serves nodes between checks while it waits for an operation.
WAIT_POLL_S = 0.05
#: Messages handled per pump before timers are checked again.
PUMP_BATCH = 256
_SPEC_IDENTITY = ("workload", "options", "dataset", "dataset_size", "batch_size", "epochs",
                  "steps", "strategy", "training")  # fmt: skip


def job_identity(spec: JobSpec) -> str:
    """A hash of what defines the training (not its resources or policy): a resumed job must match."""
    data = spec.model_dump(mode="json", by_alias=True, include=set(_SPEC_IDENTITY))
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


class Master:
    """Runs one job to completion. ``run()`` returns the report (see :mod:`report`)."""

    def __init__(
        self,
        spec: JobSpec,
        policy: Policy,
        clock: Clock | None = None,
        fresh: bool = False,
        warn: Callable[[str], None] | None = None,
        on_sample: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.spec, self.policy, self.fresh = spec, policy, fresh
        self.clock = clock or SystemClock()
        self.warn = warn or (lambda message: print(message, file=sys.stderr))
        self.on_sample = on_sample or (lambda _status: None)
        self.strategy = spec.strategy
        self.ckpt = CheckpointDir(spec.checkpoint.dir / spec.name)
        self.nodes = Nodes()
        self.dead: list[Exit] = []
        self.to_recover: set[str] = set()
        self.restarts: dict[str, int] = {}
        # leasing: False from the start of a parameter-server restore to its end
        # (lifecycle.restore_ps); still False after one means it was interrupted
        self.halt, self.leasing = False, True
        self.generation, self.version = 0, 0
        self.placement: dict[str, str] = {}
        self.speeds: dict[str, float] = {}
        self.shape = ClusterShape()
        self.resumed_from: int | None = None
        runtime = spec.runtime
        self.straggler = StragglerRule(runtime.straggler_ratio, runtime.straggler_shard_fraction)

    # -- the whole job ----------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        self.backend: LocalBackend | None = None
        self.store: StateStore | None = None
        self.zmq = zmq.Context()
        try:
            job, launch = self._prepare()
            check_writable(self.spec.checkpoint.dir)
            self.store = StateStore(self.spec.state_path)
            self._open(job, launch)
            controller = Controller(self.spec.name, self.policy, self.spec.budget.resources,
                                    self.free, self.plan.steps_total, self.machine,
                                    self.applied_plans(), self.time_s())  # fmt: skip
            schedule = Schedule(self.clock.now(), self.spec.runtime.metric_interval_s,
                                self.spec.checkpoint.interval_s)  # fmt: skip
            loop = ControlLoop(controller, self, self.clock, schedule, self.started_at)
            self.sample()  # the first reading: rates need two
            loop.run()
            while not self._finish():
                loop.step()  # recovers the node that died and relaunches the stopped ones
                loop.run()
            self.store.update_job(status="finished", finished_s=self.time_s())
            from rightsize.runtime.report import build_report

            return build_report(self)
        except RightsizeError:
            if self.store is not None:
                self.store.update_job(status="failed")
            raise
        finally:
            self._close()

    def _prepare(self) -> tuple[dict[str, Any] | None, Plan | None]:
        """Everything a user's mistake can fail, before anything is written or launched.

        Returns:
            The unfinished job to resume (or None), and the launch plan of a new one.
        """
        self.workload = build_workload(self.spec)
        layout = layout_of(self.workload.make_model(seed=self.spec.training.seed))
        self.sizes, self.sparse = layout.sizes, layout.sparse
        self.plan = self._shard_plan(len(self.workload.dataset))
        self.machine = machine_resources()
        job = self._unfinished_job()
        if job is not None and job["identity"] != job_identity(self.spec):
            raise SpecError(
                f"{self.spec.state_path} holds an unfinished job with other training settings; "
                "rerun with --fresh to start over, or set runtime.state to another file"
            )
        return job, (None if job else self._launch_plan())

    def _unfinished_job(self) -> dict[str, Any] | None:
        if self.fresh or not self.spec.state_path.exists():
            return None
        store = StateStore(self.spec.state_path)
        try:
            job = store.job()
        finally:
            store.close()
        return job if job is not None and job["status"] == "running" else None

    def _open(self, job: dict[str, Any] | None, launch: Plan | None) -> None:
        self.backend = LocalBackend(self.spec.runtime.isolation, self.ckpt.root / "logs", self.warn)
        self.collector = MetricCollector(self.spec.runtime.ps_bandwidth)
        self.server = Server(self.zmq, Counters())
        if job is not None:
            self._resume(job)
        else:
            self._start(launch)

    def _shard_plan(self, dataset_size: int) -> ShardPlan:
        spec = self.spec
        shard_size = spec.runtime.shard_size or spec.batch_size * DEFAULT_SHARD_BATCHES
        epochs = None if spec.steps is not None else (spec.epochs or 1)
        return ShardPlan(dataset_size, shard_size, spec.batch_size, epochs, spec.steps,
                         spec.training.seed, spec.training.shuffle)  # fmt: skip

    def _start(self, plan: Plan) -> None:
        self.started_at = self.clock.now()
        spec_json = self.spec.model_dump(mode="json", by_alias=True)
        self.store.start_job(self.spec.name, spec_json, job_identity(self.spec), self.started_at)
        self.store.update_job(isolation=self.backend.mode)
        self.ckpt.prune(keep=set())
        self.manager = ShardManager(self.plan)
        lifecycle.launch_job(self, plan.shape, None, str(plan.action), plan.reason, plan.details)

    def _resume(self, job: dict[str, Any]) -> None:
        self.started_at = job["started_at"]
        self.generation = job["generation"] + 1
        self.store.update_job(masters=job["masters"] + 1, isolation=self.backend.mode)
        row = self.store.latest_checkpoint()
        self.version = max(self.store.checkpoint_versions(), default=0)
        self.manager = ShardManager(self.plan, row.shards if row else None)
        self.resumed_from = row.version if row else 0
        shape = self.store.current_shape()
        where = f"checkpoint v{row.version}" if row else "the start (no checkpoint yet)"
        lifecycle.launch_job(self, shape, row, "resume", f"master restarted; resuming from {where}")

    def _launch_plan(self) -> Plan:
        """The job file's initial shape, or the policy's launch plan for ``initial_shape: auto``.

        No shapes are measured before launch here, so ``prior`` is empty.
        """
        if isinstance(self.spec.initial_shape, ShapeSpec):
            shape = self.spec.initial_shape.to_shape()
            plan = Plan(shape, Action.LAUNCH, "initial_shape of the job file")
        else:
            machine = self.machine
            request = LaunchRequest(self.spec.name, self.spec.budget.resources, machine, (),
                                    machine)  # fmt: skip
            plan = self.policy.launch_plan(request)
            if plan is None:
                raise ResourceError(
                    f"policy {self.policy.name} cannot start the job within budget "
                    f"{self.spec.budget.resources} on this machine ({machine})"
                )
        why = rejection(plan.shape, self.spec.budget.resources, self.strategy)
        if why:
            raise SpecError(f"initial shape {plan.shape.describe()} cannot run: {why}")
        return plan

    def applied_plans(self) -> list[Plan]:
        """The plans the timeline says were applied (launch included), for the policy."""
        actions = {str(a) for a in Action}
        return [
            Plan(ClusterShape.from_dict(row["shape"]), Action(row["action"]), row["reason"],
                 row["notes"])
            for row in self.store.timeline() if row["applied"] and row["action"] in actions
        ]  # fmt: skip

    def _close(self) -> None:
        if self.backend is not None:
            self.backend.close()
        if hasattr(self, "server"):
            self.server.close()
        self.zmq.destroy(linger=0)
        if self.store is not None:
            self.store.close()

    # -- nodes ----------------------------------------------------------------------
    def launch(self, node: NodeSpec, config: dict[str, Any] | None = None) -> NodeState:
        """Start ``node``'s process; ``config`` is merged into what it gets on registering."""
        role = "ps" if node.role == NodeRole.PS else (
            "worker" if self.strategy == Strategy.PS else "rank")  # fmt: skip
        argv = [sys.executable, "-m", "rightsize.runtime.node", "--master", self.server.address,
                "--name", node.name, "--role", role, "--parent", str(os.getpid())]  # fmt: skip
        pid = self.backend.launch(node, argv, {})
        state = NodeState(node, pid, self.clock.now(), config=dict(config or {}))
        self.nodes.add(state)
        self.collector.forget(node.name)
        return state

    def stop_node(self, name: str) -> None:
        node = self.nodes.get(name)
        if node is not None:
            node.status = Status.STOPPING
        self.backend.stop(name)
        if node is not None:
            node.status = Status.DEAD

    def wait_until(self, predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
        """Serve nodes until ``predicate()``; a node's death interrupts the wait.

        Raises:
            Interrupted: a node of the shape died meanwhile.
            JobFailed: ``timeout_s`` passed.
        """
        deadline = self.clock.now() + timeout_s
        while not predicate():
            if self.dead:
                raise Interrupted(what)
            if self.clock.now() > deadline:
                raise JobFailed(f"{what} did not happen within {timeout_s:g}s; "
                                f"node logs are in {self.ckpt.root / 'logs'}")  # fmt: skip
            self.pump(WAIT_POLL_S)

    def free(self, shape: ClusterShape):
        """What this machine has beyond ``shape`` (the local backend's whole "cluster")."""
        total, used = self.machine, shape.total()
        return type(total)(max(0.0, total.cpu_cores - used.cpu_cores),
                           max(0, total.memory_bytes - used.memory_bytes))  # fmt: skip

    def time_s(self) -> float:
        return self.clock.now() - self.started_at

    def threads(self, node: NodeSpec) -> int:
        return threads_for(node.resources.cpu_cores, len(self.backend.cpus))

    # -- the mechanism the control loop drives ------------------------------------------
    def pump(self, timeout_s: float) -> None:
        from rightsize.runtime.rpc import handle

        socket = self.server.socket
        if socket.poll(int(max(0.0, timeout_s) * 1000), zmq.POLLIN):
            for _ in range(PUMP_BATCH):
                if not socket.poll(0, zmq.POLLIN):
                    break
                identity, header, tensors = self.server.receive()
                reply, out = handle(self, header, tensors)
                self.server.reply(identity, {**reply, "rid": header.get("rid")}, out)
        for exit_ in self.backend.exits():
            self._on_exit(exit_)

    def _on_exit(self, exit_: Exit) -> None:
        node = self.nodes.get(exit_.name)
        if node is None:
            return
        stopping = node.status == Status.STOPPING
        node.status = Status.DEAD
        if not stopping:  # nobody asked it to end: a failure
            self.dead.append(exit_)

    def _finish(self) -> bool:
        """Stop the nodes and take the final checkpoint. False when a node died after the
        loop's last turn or on the way out (a PS killed as training ends loses the updates
        since the last checkpoint): the job then recovers and trains what was lost."""
        if self.dead:
            return False
        try:
            lifecycle.finish(self)
        except Interrupted:
            return False
        return True

    def failures(self) -> list[NodeEvent]:
        events = []
        for exit_ in self.dead:
            kind = EventKind.OOM_KILLED if exit_.oom_killed else EventKind.FAILED
            detail = f"exit code {exit_.returncode}"
            events.append(NodeEvent(self.time_s(), exit_.name, kind, detail))
            self.store.record_event(self.time_s(), exit_.name, str(kind), detail)
            self.to_recover.add(exit_.name)
        self.dead.clear()
        return events

    def recover(self) -> None:
        try:
            lifecycle.recover(self)
        except Interrupted:
            pass  # another node died meanwhile: the next turn of the loop recovers again

    def apply(self, plan: Plan) -> Transition:
        return elastic.apply_plan(self, plan)

    def checkpoint(self) -> None:
        try:
            lifecycle.checkpoint(self)
        except Interrupted:
            pass  # the failure is handled next; the half-written version is never committed

    def finished(self) -> bool:
        return self.manager.finished

    def steps_done(self) -> int:
        return self.manager.batches_done

    def sample(self) -> MetricSample | None:
        now, readings = self.time_s(), []
        for spec in self.shape.nodes:
            node = self.nodes.get(spec.name)
            if node is None or node.status != Status.RUNNING:
                continue
            try:
                cpu_s, memory = self.backend.reading(spec.name)
            except (OSError, KeyError):  # it just ended; its exit is handled next
                continue
            readings.append((spec, Reading.of(now, cpu_s, memory, node.stats)))
        sample = self.collector.collect(now, readings)
        if sample is None:
            return None
        for m in sample.role(NodeRole.WORKER):
            self.speeds[m.name] = m.steps_per_s
        status = self.status(sample)
        self.store.record_sample(now, status)
        self.on_sample(status)
        return sample

    def status(self, sample: MetricSample) -> dict[str, Any]:
        """One line of the progress display and one entry of the report's throughput series."""
        return {
            "time_s": round(sample.time_s, 3),
            "epoch": self.manager.epoch,
            "steps_done": self.manager.batches_done,
            "steps_total": self.plan.steps_total,
            "steps_per_s": sample.steps_per_s,
            "samples_per_s": sample.samples_per_s,
            "loss": self.collector.loss,
            "e_job": sample.e_job,
            "shape": self.shape.describe(),
            "nodes": [
                {"name": m.name, "role": str(m.role), "cpu_used": m.cpu_used_cores,
                 "cpu_allocated": m.cpu_allocated_cores, "memory_used": m.memory_used_bytes,
                 "memory_allocated": m.memory_allocated_bytes, "net_in": m.net_in_bytes_per_s,
                 "net_out": m.net_out_bytes_per_s, "steps_per_s": m.steps_per_s}
                for m in sample.nodes
            ],
        }  # fmt: skip

    # -- cluster (parameter-server strategy) ---------------------------------------------------
    def cluster_info(self) -> dict[str, Any]:
        servers = {ps: self.nodes.get(ps).address for ps in sorted(set(self.placement.values()))}
        return {"generation": self.generation, "ps": servers, "placement": self.placement}

    def cluster_ready(self) -> bool:
        if self.strategy != Strategy.PS:
            return True
        holders = [self.nodes.get(ps) for ps in set(self.placement.values())]
        return all(n is not None and n.alive and n.generation == self.generation for n in holders)
