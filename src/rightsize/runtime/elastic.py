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

from typing import TYPE_CHECKING

from rightsize.core.shape import NodeRole, NodeSpec
from rightsize.core.spec import Strategy
from rightsize.runtime import lifecycle
from rightsize.runtime.backends.contract import NotInPlace
from rightsize.runtime.control import Transition
from rightsize.runtime.errors import Interrupted, StopRequested
from rightsize.runtime.jobstate import Phase
from rightsize.runtime.partition import bytes_per_ps, names_on, repartition
from rightsize.runtime.protocol import AckKind, Export, Load, PSConfig, Stop, Threads
from rightsize.runtime.reshape import ShapeDiff, diff, rejection
from rightsize.scaling.api import Plan, WorkerRange

if TYPE_CHECKING:
    from rightsize.runtime.master import Master


def apply_plan(master: Master, plan: Plan) -> Transition:
    """Turn the running shape into ``plan.shape``; returns what happened and how long it took."""
    job = master.job
    change = diff(job.shape, plan.shape)
    why = (rejection(plan.shape, master.spec.budget.resources, job.strategy)
           or _outside(master.worker_range, plan.shape) or _not_now(job, change))  # fmt: skip
    if not why and not change.empty:  # last: a granted reservation takes capacity
        why = master.lease.reserve(plan.shape.total())
    if why or change.empty:
        reason = f"{plan.reason} (rejected: {why})" if why else f"{plan.reason} (no change)"
        if not master.store.repeats_last(str(plan.action), reason, plan.shape):
            master.store.record_shape(master.time_s(), str(plan.action), reason, plan.shape,
                                      False)  # fmt: skip
        return Transition(False)
    t0, details = master.clock.now(), {}
    try:
        if job.strategy == Strategy.ALLREDUCE and change.workers_changed:
            _resize(master, change.resize, details)
            lifecycle.restart_group(master, plan.shape, plan.reason, True, str(plan.action))
            return Transition(True, master.clock.now() - t0, details)
        # New nodes start before running ones grow: the CPU the growth will take is idle
        # while they start, and the start-up allowance lends it to them.
        _resize(master, change.shrinking, details)
        _add(master, change, details)
        _resize(master, change.growing, details)
        if job.strategy == Strategy.ALLREDUCE and details.get("relaunched_to_resize"):
            lifecycle.restart_group(master, plan.shape, plan.reason, True, str(plan.action))
            return Transition(True, master.clock.now() - t0, details)
        if change.ps_changed:
            _repartition(master, [n.name for n in plan.shape.ps], details)
        job.shape = plan.shape
        _remove(master, change, details)
    except StopRequested:
        _abandon(master, plan, "stopped by a signal")
        raise
    except Interrupted:
        _abandon(master, plan, "interrupted by a node failure")
        return Transition(False, master.clock.now() - t0, details)
    except OSError as exc:  # the kernel refused a limit (memory below what a node uses)
        _abandon(master, plan, f"refused by the kernel: {exc.strerror or exc}")
        return Transition(False, master.clock.now() - t0, details)
    transition = lifecycle.record(master, str(plan.action), plan.reason, t0, plan.details,
                                  **details)  # fmt: skip
    return Transition(True, transition, details)


def _outside(workers: WorkerRange, shape) -> str | None:
    """Why ``shape`` has more or fewer workers than the job allows, if it has."""
    if workers.allows(shape.n_workers):
        return None
    high = "any" if workers.high is None else workers.high
    return f"{shape.n_workers} workers is outside the allowed {workers.low} to {high}"


def _not_now(job, change: ShapeDiff) -> str | None:
    """Why the job cannot take this change in its current phase, if it cannot."""
    if job.phase == Phase.TRAINING:
        return None
    if job.phase == Phase.RESTORING and not (change.add or change.remove):
        return None  # resizing (relaunching an OOM-killed server bigger) is part of a restore
    return f"the job is {job.phase}"


def _abandon(master: Master, plan: Plan, why: str) -> None:
    """A plan cannot finish: undo the halt, stop what was launched for it, record it.

    If the servers had already moved to a new placement, the job goes to ``RESTORING``:
    the next recovery puts every server of the current shape back on the latest
    checkpoint (the repartition's own export, if it was committed).
    """
    job = master.job
    current = {n.name for n in job.shape.nodes}
    for node in list(job.nodes.alive()):
        if node.name not in current:
            master.stop_node(node.name)
    if job.phase == Phase.HALTED:
        job.move_to(Phase.TRAINING if job.cluster_ready() else Phase.RESTORING)
    reason = f"{plan.reason} ({why})"
    master.store.record_shape(master.time_s(), str(plan.action), reason, plan.shape, False)


def _resize(master: Master, pairs: tuple[tuple[NodeSpec, NodeSpec], ...], details: dict) -> None:
    """Resize live nodes in place; relaunch dead ones (OOM-killed) with the new resources,
    and live ones whose host has no room for the new size (a backend that spans hosts says
    :class:`NotInPlace`). ``details`` name the nodes resized in place and those relaunched."""
    job = master.job
    dead_ps: dict[str, NodeSpec] = {}
    for _old, new in pairs:
        node = job.nodes.get(new.name)
        t0 = master.clock.now()
        if node is not None and node.alive:
            try:
                threads = master.backend.resize(new.name, new.resources)
            except NotInPlace as exc:
                _listed(details, "relaunched_to_resize", new.name)
                master.backend.note(new.name, f"relaunching {new.name} at {new.resources}: {exc}")
                if job.strategy == Strategy.ALLREDUCE:
                    continue  # the group restarts at the plan's shape (apply_plan)
                if new.role == NodeRole.PS:
                    lifecycle.checkpoint(master)  # what it holds survives the move
                master.stop_node(new.name)
            else:
                node.spec, node.startup = new, None  # a plan's size replaces a start-up allowance
                node.commands.append(Threads(threads))
                # a rank whose script ends meanwhile never reads the command: its exit ends
                # the wait (a failure is the wait's to raise, a clean exit the job's end)
                master.wait_until(lambda n=node: not n.commands or not n.alive,
                                  master.spec.runtime.startup_timeout_s,
                                  f"{new.name} taking its new size")  # fmt: skip
                details[f"resize {new.name}_s"] = master.clock.now() - t0
                _listed(details, "resized_in_place", new.name)
                continue
        else:
            job.count_restart(new.name)  # recovered here, bigger: still a restart
        if new.role == NodeRole.PS:
            dead_ps[new.name] = new
        elif job.strategy == Strategy.PS:
            job.shape = job.shape.with_resources(new.name, new.resources)
            lifecycle.relaunch_workers(master, [new], f"relaunched with {new.resources}",
                                       own_row=False)  # fmt: skip
            details[f"relaunch {new.name}_s"] = master.clock.now() - t0
        else:  # an OOM-killed allreduce rank: the group restarts with the plan's shape
            job.shape = job.shape.with_resources(new.name, new.resources)
    if dead_ps:
        t0 = master.clock.now()
        for name, spec in dead_ps.items():
            job.shape = job.shape.with_resources(name, spec.resources)
        lifecycle.restore_ps(master, "relaunching parameter servers at their new size", dead_ps)
        details["relaunch_ps_s"] = master.clock.now() - t0


def _listed(details: dict, key: str, name: str) -> None:
    details[key] = [*details.get(key, []), name]


def _add(master: Master, change: ShapeDiff, details: dict) -> None:
    if not change.add:
        return
    job = master.job
    t0 = master.clock.now()
    empty = PSConfig(job.generation, (), ())  # a new server holds nothing until it loads
    lifecycle.start_nodes(
        master, [(s, empty if s.role == NodeRole.PS else None) for s in change.add],
        "new nodes starting",
    )  # fmt: skip
    details["launch_s"] = master.clock.now() - t0
    workers = [job.nodes.get(s.name) for s in change.add if s.role == NodeRole.WORKER]
    if workers and not change.ps_changed:
        master.wait_until(lambda: all(w.first_step_s or _no_work(master) for w in workers),
                          master.spec.runtime.startup_timeout_s,
                          "new workers taking their first step")  # fmt: skip
        details["first_step_s"] = master.clock.now() - t0


def _no_work(master: Master) -> bool:
    shards = master.job.shards
    return shards.finished or not shards.todo


def _repartition(master: Master, ps_names: list[str], details: dict) -> None:
    """DLRover §5.3: halt workers, export the old servers' tensors, load the new placement."""
    job = master.job
    t_halt = master.clock.now()
    timeout = master.spec.runtime.startup_timeout_s
    job.move_to(Phase.HALTED)
    workers_paused = lambda: all(n.paused for n in job.nodes.running(NodeRole.WORKER))  # noqa: E731
    master.wait_until(workers_paused, timeout, "workers halting for the repartition")
    details["halt_s"] = master.clock.now() - t_halt
    version = job.next_version()
    snapshot, steps = job.shards.snapshot(), job.shards.batches_done
    old = {ps: master.ckpt.ps_file(version, ps) for ps in set(job.placement.values())}
    for ps, path in old.items():
        job.nodes.get(ps).pop_acks(AckKind.EXPORTED)  # left by an abandoned repartition
        job.nodes.get(ps).commands.append(Export(path, job.generation))
    exported = lambda: all(job.nodes.get(p).has_ack(AckKind.EXPORTED) for p in old)  # noqa: E731
    master.wait_until(exported, timeout, "parameter servers exporting")
    details["export_s"] = master.clock.now() - t_halt - details["halt_s"]
    lifecycle.commit(master, version, snapshot, old, steps)
    placement = repartition(job.placement, job.sizes, ps_names)
    generation = lifecycle.bump_generation(master)
    for ps in ps_names:
        names = names_on(placement, ps)
        sources = tuple(sorted({old[job.placement[t]] for t in names}))
        job.nodes.get(ps).commands.append(Load(generation, names, sources))
    job.placement = placement
    master.wait_until(job.cluster_ready, timeout, "parameter servers loading")
    job.move_to(Phase.TRAINING)
    details["paused_s"] = master.clock.now() - t_halt
    details["ps_bytes"] = str(bytes_per_ps(placement, job.sizes))


def _remove(master: Master, change: ShapeDiff, details: dict) -> None:
    if not change.remove:
        return
    job = master.job
    t0 = master.clock.now()
    leaving = [job.nodes.get(s.name) for s in change.remove]
    leaving = [n for n in leaving if n is not None and n.alive]
    for node in leaving:
        node.commands.append(Stop())
        node.mark_stopping()
    lifecycle.wait_ended(master)
    for node in leaving:
        if node.role == NodeRole.WORKER:
            job.shards.release(node.name)
    details["remove_s"] = master.clock.now() - t0
