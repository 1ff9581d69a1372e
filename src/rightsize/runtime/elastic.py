"""Carrying out a policy's plan on the running job, each step timed (DLRover §5.3, §4.2).

- **Resize a node** in place: new CPU quota and memory limit, torch threads
  follow; timed until the node has received its new thread count.
- **Add a worker**: it is launched and joins without pausing the others (it
  leases shards like any worker); timed until its first step. Nodes that
  shrink are resized before new nodes start, nodes that grow after: the CPU a
  growth will take is idle while the new nodes start, and the start-up
  allowance (:mod:`allowance`) lends it to them (a worker added at 0.26 CPU
  otherwise spends seconds importing torch at that quota).
- **Remove a worker**: told to stop at its next batch boundary; its lease goes
  back to TODO.
- **Add, remove or replace parameter servers**: new servers are launched while
  training goes on; then workers halt at a batch boundary, old servers export
  their tensors (a consistent checkpoint, committed with the shard queues),
  every server of the new set loads its share under a new generation, and the
  workers resume; servers leaving are stopped afterwards. Workers pause only
  for the swap (DLRover: "workers do not wait for the creation and
  initialization of new PS").
- **Relaunch an OOM-killed node** with the plan's (more) memory (DLRover §4.2).
- **Allreduce**: a change in the set of ranks restarts the group from a fresh
  checkpoint; resizes stay in place.

A plan is checked first (:func:`reshape.rejection`); a rejected or
interrupted plan is recorded as not applied and changes nothing it had not
finished.
"""

from __future__ import annotations

from rightsize.core.shape import NodeRole, NodeSpec
from rightsize.core.spec import Strategy
from rightsize.runtime.backends.contract import NotInPlace
from rightsize.runtime.control import Transition
from rightsize.runtime.errors import Interrupted, StopRequested
from rightsize.runtime.jobstate import JobState, Phase
from rightsize.runtime.lifecycle import Lifecycle
from rightsize.runtime.partition import bytes_per_ps, names_on, repartition
from rightsize.runtime.protocol import AckKind, Export, Load, PSConfig, Threads
from rightsize.runtime.reshape import ShapeDiff, diff, rejection
from rightsize.runtime.steps import Steps
from rightsize.scaling.api import Plan, WorkerRange


class Elastic:
    """Carries out plans on one job, through ``steps`` and its ``lifecycle``."""

    def __init__(self, steps: Steps, lifecycle: Lifecycle) -> None:
        self.steps, self.lifecycle = steps, lifecycle
        self.job, self.clock, self.settings = steps.job, steps.clock, steps.settings
        self.nodes, self.wait_until = steps.nodes, steps.wait_until

    def apply_plan(self, plan: Plan) -> Transition:
        """Turn the running shape into ``plan.shape``; returns what happened and how long it
        took."""
        job = self.job
        change = diff(job.shape, plan.shape)
        why = (rejection(plan.shape, self.settings.budget, job.strategy)
               or _outside(self.settings.worker_range, plan.shape)
               or _not_now(job, change))  # fmt: skip
        if not why and not change.empty:  # last: a granted reservation takes capacity
            why = self.steps.ports.lease.reserve(plan.shape.total(), len(plan.shape.nodes))
        if why or change.empty:
            reason = f"{plan.reason} (rejected: {why})" if why else f"{plan.reason} (no change)"
            if not self.steps.timeline.repeats_last(str(plan.action), reason, plan.shape):
                self.steps.record_not_applied(str(plan.action), reason, plan.shape)
            return Transition(False)
        t0, details = self.clock.now(), {}
        try:
            if job.strategy == Strategy.ALLREDUCE and change.workers_changed:
                self._resize(change.resize, details)
                self.lifecycle.restart_group(plan.shape, plan.reason, True, str(plan.action))
                return Transition(True, self.clock.now() - t0, details)
            # New nodes start before running ones grow: the CPU the growth will take is idle
            # while they start, and the start-up allowance lends it to them.
            self._resize(change.shrinking, details)
            self._add(change, details)
            self._resize(change.growing, details)
            if job.strategy == Strategy.ALLREDUCE and details.get("relaunched_to_resize"):
                self.lifecycle.restart_group(plan.shape, plan.reason, True, str(plan.action))
                return Transition(True, self.clock.now() - t0, details)
            if change.ps_changed:
                self._repartition([n.name for n in plan.shape.ps], details)
            job.take_shape(plan.shape)
            self._remove(change, details)
        except StopRequested:
            self._abandon(plan, "stopped by a signal")
            raise
        except Interrupted:
            self._abandon(plan, "interrupted by a node failure")
            return Transition(False, self.clock.now() - t0, details)
        except OSError as exc:  # the kernel refused a limit (memory below what a node uses)
            self._abandon(plan, f"refused by the kernel: {exc.strerror or exc}")
            return Transition(False, self.clock.now() - t0, details)
        transition = self.steps.record(str(plan.action), plan.reason, t0, plan.details,
                                       **details)  # fmt: skip
        return Transition(True, transition, details)

    def _abandon(self, plan: Plan, why: str) -> None:
        """A plan cannot finish: undo the halt, stop what was launched for it, record it.

        If the servers had already moved to a new placement, the job goes to ``RESTORING``:
        the next recovery puts every server of the current shape back on the latest
        checkpoint (the repartition's own export, if it was committed).
        """
        job = self.job
        current = {n.name for n in job.shape.nodes}
        for node in list(job.nodes.alive()):
            if node.name not in current:
                self.nodes.stop(node.name)
        if job.phase == Phase.HALTED:
            job.move_to(Phase.TRAINING if job.cluster_ready() else Phase.RESTORING)
        reason = f"{plan.reason} ({why})"
        self.steps.record_not_applied(str(plan.action), reason, plan.shape)

    def _resize(self, pairs: tuple[tuple[NodeSpec, NodeSpec], ...], details: dict) -> None:
        """Resize live nodes in place; relaunch dead ones (OOM-killed) with the new resources,
        and live ones whose host has no room for the new size (a backend that spans hosts says
        :class:`NotInPlace`). ``details`` name the nodes resized in place and those relaunched."""
        job = self.job
        dead_ps: dict[str, NodeSpec] = {}
        for _old, new in pairs:
            node = job.nodes.get(new.name)
            t0 = self.clock.now()
            if node is not None and node.alive:
                try:
                    threads = self.nodes.resize(new.name, new.resources)
                except NotInPlace as exc:
                    _listed(details, "relaunched_to_resize", new.name)
                    self.nodes.note(new.name, f"relaunching {new.name} at {new.resources}: {exc}")
                    if job.strategy == Strategy.ALLREDUCE:
                        continue  # the group restarts at the plan's shape (apply_plan)
                    if new.role == NodeRole.PS:
                        self.lifecycle.checkpoint()  # what it holds survives the move
                    self.nodes.stop(new.name)
                else:
                    node.resized(new)
                    node.commands.append(Threads(threads))
                    # a rank whose script ends meanwhile never reads the command: its exit ends
                    # the wait (a failure is the wait's to raise, a clean exit the job's end)
                    self.wait_until(lambda n=node: not n.commands or not n.alive,
                                    self.settings.startup_timeout_s,
                                    f"{new.name} taking its new size")  # fmt: skip
                    details[f"resize {new.name}_s"] = self.clock.now() - t0
                    _listed(details, "resized_in_place", new.name)
                    continue
            else:
                job.count_restart(new.name)  # recovered here, bigger: still a restart
            if new.role == NodeRole.PS:
                dead_ps[new.name] = new
            elif job.strategy == Strategy.PS:
                job.resize_in_shape(new.name, new.resources)
                self.lifecycle.relaunch_workers([new], f"relaunched with {new.resources}",
                                                own_row=False)  # fmt: skip
                details[f"relaunch {new.name}_s"] = self.clock.now() - t0
            else:  # an OOM-killed allreduce rank: the group restarts with the plan's shape
                job.resize_in_shape(new.name, new.resources)
        if dead_ps:
            t0 = self.clock.now()
            for name, spec in dead_ps.items():
                job.resize_in_shape(name, spec.resources)
            self.lifecycle.restore_ps("relaunching parameter servers at their new size", dead_ps)
            details["relaunch_ps_s"] = self.clock.now() - t0

    def _add(self, change: ShapeDiff, details: dict) -> None:
        if not change.add:
            return
        job = self.job
        t0 = self.clock.now()
        empty = PSConfig(job.generation, (), ())  # a new server holds nothing until it loads
        self.steps.start_nodes(
            [(s, empty if s.role == NodeRole.PS else None) for s in change.add],
            "new nodes starting",
        )  # fmt: skip
        details["launch_s"] = self.clock.now() - t0
        workers = [job.nodes.get(s.name) for s in change.add if s.role == NodeRole.WORKER]
        if workers and not change.ps_changed:
            self.wait_until(lambda: all(w.first_step_s or self._no_work() for w in workers),
                            self.settings.startup_timeout_s,
                            "new workers taking their first step")  # fmt: skip
            details["first_step_s"] = self.clock.now() - t0

    def _no_work(self) -> bool:
        shards = self.job.shards
        return shards.finished or not shards.todo

    def _repartition(self, ps_names: list[str], details: dict) -> None:
        """DLRover §5.3: halt workers, export the old servers' tensors, load the new placement."""
        job = self.job
        t_halt = self.clock.now()
        timeout = self.settings.startup_timeout_s
        job.move_to(Phase.HALTED)
        workers_paused = lambda: all(n.paused for n in job.nodes.running(NodeRole.WORKER))  # noqa: E731
        self.wait_until(workers_paused, timeout, "workers halting for the repartition")
        details["halt_s"] = self.clock.now() - t_halt
        version = job.next_version()
        snapshot, steps = job.shards.snapshot(), job.shards.batches_done
        ckpt = self.steps.ports.ckpt
        old = {ps: ckpt.ps_file(version, ps) for ps in set(job.placement.values())}
        for ps, path in old.items():
            job.nodes.get(ps).pop_acks(AckKind.EXPORTED)  # left by an abandoned repartition
            job.nodes.get(ps).commands.append(Export(path, job.generation))
        exported = lambda: all(job.nodes.get(p).has_ack(AckKind.EXPORTED) for p in old)  # noqa: E731
        self.wait_until(exported, timeout, "parameter servers exporting")
        details["export_s"] = self.clock.now() - t_halt - details["halt_s"]
        self.steps.commit(version, snapshot, old, steps)
        placement = repartition(job.placement, job.sizes, ps_names)
        generation = self.steps.bump_generation()
        for ps in ps_names:
            names = names_on(placement, ps)
            sources = tuple(sorted({old[job.placement[t]] for t in names}))
            job.nodes.get(ps).commands.append(Load(generation, names, sources))
        job.place(placement)
        self.wait_until(job.cluster_ready, timeout, "parameter servers loading")
        job.move_to(Phase.TRAINING)
        details["paused_s"] = self.clock.now() - t_halt
        details["ps_bytes"] = str(bytes_per_ps(placement, job.sizes))

    def _remove(self, change: ShapeDiff, details: dict) -> None:
        if not change.remove:
            return
        job = self.job
        t0 = self.clock.now()
        leaving = [job.nodes.get(s.name) for s in change.remove]
        leaving = [n for n in leaving if n is not None and n.alive]
        self.steps.stop_all(leaving)
        for node in leaving:
            if node.role == NodeRole.WORKER:
                job.shards.release(node.name)
        details["remove_s"] = self.clock.now() - t0


def _outside(workers: WorkerRange, shape) -> str | None:
    """Why ``shape`` has more or fewer workers than the job allows, if it has."""
    if workers.allows(shape.n_workers):
        return None
    high = "any" if workers.high is None else workers.high
    return f"{shape.n_workers} workers is outside the allowed {workers.low} to {high}"


def _not_now(job: JobState, change: ShapeDiff) -> str | None:
    """Why the job cannot take this change in its current phase, if it cannot."""
    if job.phase == Phase.TRAINING:
        return None
    if job.phase == Phase.RESTORING and not (change.add or change.remove):
        return None  # resizing (relaunching an OOM-killed server bigger) is part of a restore
    return f"the job is {job.phase}"


def _listed(details: dict, key: str, name: str) -> None:
    details[key] = [*details.get(key, []), name]
