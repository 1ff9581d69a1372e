"""Carrying out a policy's plan on the running job, each step timed (DLRover §5.3, §4.2).

- **Resize a node** in place: new CPU quota and memory limit, torch threads
  follow; timed until the node has received its new thread count.
- **Add a worker**: it is launched and joins without pausing the others (it
  leases shards like any worker); timed until its first step.
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
from rightsize.runtime.control import Transition
from rightsize.runtime.errors import Interrupted
from rightsize.runtime.nodes import Status
from rightsize.runtime.partition import bytes_per_ps, repartition
from rightsize.runtime.reshape import ShapeDiff, diff, rejection
from rightsize.scaling.api import Plan

if TYPE_CHECKING:
    from rightsize.runtime.master import Master


def apply_plan(master: Master, plan: Plan) -> Transition:
    """Turn the running shape into ``plan.shape``; returns what happened and how long it took."""
    why = rejection(plan.shape, master.spec.budget.resources, master.strategy)
    change = diff(master.shape, plan.shape)
    if why or change.empty:
        reason = f"{plan.reason} (rejected: {why})" if why else f"{plan.reason} (no change)"
        master.store.record_shape(master.time_s(), str(plan.action), reason, plan.shape, False)
        return Transition(False)
    t0, details = master.clock.now(), {}
    try:
        if master.strategy == Strategy.ALLREDUCE and change.workers_changed:
            _resize(master, change, details)
            lifecycle.restart_group(master, plan.shape, plan.reason, True, str(plan.action))
            return Transition(True, master.clock.now() - t0, details)
        _resize(master, change, details)
        _add(master, change, details)
        if change.ps_changed:
            _repartition(master, [n.name for n in plan.shape.ps], details)
        master.shape = plan.shape
        _remove(master, change, details)
    except Interrupted:
        _abandon(master, plan)
        return Transition(False, master.clock.now() - t0, details)
    transition = lifecycle.record(master, str(plan.action), plan.reason, t0, plan.details,
                                  **details)  # fmt: skip
    return Transition(True, transition, details)


def _abandon(master: Master, plan: Plan) -> None:
    """A node died mid-plan: undo the halt, stop what was launched for the plan, record it."""
    master.halt = False
    current = {n.name for n in master.shape.nodes}
    for node in list(master.nodes.alive()):
        if node.name not in current:
            master.stop_node(node.name)
    reason = f"{plan.reason} (interrupted by a node failure)"
    master.store.record_shape(master.time_s(), str(plan.action), reason, plan.shape, False)


def _resize(master: Master, change: ShapeDiff, details: dict) -> None:
    """Resize live nodes in place; relaunch dead ones (OOM-killed) with the new resources."""
    dead_ps: dict[str, NodeSpec] = {}
    for _old, new in change.resize:
        node = master.nodes.get(new.name)
        t0 = master.clock.now()
        if node is None or not node.alive:
            master.to_recover.discard(new.name)
            if new.role == NodeRole.PS:
                dead_ps[new.name] = new
            else:
                master.shape = master.shape.with_resources(new.name, new.resources)
                lifecycle.relaunch_workers(master, [new], f"relaunched with {new.resources}",
                                           own_row=False)  # fmt: skip
                details[f"relaunch {new.name}_s"] = master.clock.now() - t0
            continue
        threads = master.backend.resize(new.name, new.resources)
        node.spec = new
        node.commands.append({"cmd": "threads", "n": threads})
        master.wait_until(lambda n=node: not n.commands, master.spec.runtime.startup_timeout_s,
                          f"{new.name} taking its new size")  # fmt: skip
        details[f"resize {new.name}_s"] = master.clock.now() - t0
    if dead_ps:
        t0 = master.clock.now()
        for name, spec in dead_ps.items():
            master.shape = master.shape.with_resources(name, spec.resources)
        lifecycle.restore_ps(master, "relaunching OOM-killed parameter servers", dead_ps)
        details["relaunch_ps_s"] = master.clock.now() - t0


def _add(master: Master, change: ShapeDiff, details: dict) -> None:
    if not change.add:
        return
    t0 = master.clock.now()
    startup = master.spec.runtime.startup_timeout_s
    for spec in change.add:
        master.launch(spec, {"names": [], "paths": []} if spec.role == NodeRole.PS else None)
    master.wait_until(lambda: lifecycle.all_registered(master, change.add), startup,
                      "new nodes starting")  # fmt: skip
    details["launch_s"] = master.clock.now() - t0
    workers = [master.nodes.get(s.name) for s in change.add if s.role == NodeRole.WORKER]
    if workers and not change.ps_changed:
        master.wait_until(lambda: all(w.first_step_s or _no_work(master) for w in workers),
                          startup, "new workers taking their first step")  # fmt: skip
        details["first_step_s"] = master.clock.now() - t0


def _no_work(master: Master) -> bool:
    return master.manager.finished or not master.manager.todo


def _repartition(master: Master, ps_names: list[str], details: dict) -> None:
    """DLRover §5.3: halt workers, export the old servers' tensors, load the new placement."""
    t_halt = master.clock.now()
    timeout = master.spec.runtime.startup_timeout_s
    master.halt = True
    workers_paused = lambda: all(n.paused for n in master.nodes.running(NodeRole.WORKER))  # noqa: E731
    master.wait_until(workers_paused, timeout, "workers halting for the repartition")
    details["halt_s"] = master.clock.now() - t_halt
    version = master.version = master.version + 1
    snapshot, steps = master.manager.snapshot(), master.manager.batches_done
    old = {ps: str(master.ckpt.ps_file(version, ps)) for ps in set(master.placement.values())}
    for ps, path in old.items():
        master.nodes.get(ps).commands.append({"cmd": "export", "path": path,
                                              "generation": master.generation})  # fmt: skip
    exported = lambda: all(master.nodes.get(p).has_ack("exported") for p in old)  # noqa: E731
    master.wait_until(exported, timeout, "parameter servers exporting")
    details["export_s"] = master.clock.now() - t_halt - details["halt_s"]
    lifecycle.commit(master, version, snapshot, old, steps)
    placement = repartition(master.placement, master.sizes, ps_names)
    generation = lifecycle.bump_generation(master)
    for ps in ps_names:
        names = lifecycle.names_on(placement, ps)
        sources = sorted({old[master.placement[t]] for t in names})
        master.nodes.get(ps).commands.append({"cmd": "load", "generation": generation,
                                              "names": names, "paths": sources})  # fmt: skip
    master.placement = placement
    master.wait_until(master.cluster_ready, timeout, "parameter servers loading")
    for ps in old:
        master.nodes.get(ps).pop_acks("exported")
    master.halt = False
    details["paused_s"] = master.clock.now() - t_halt
    details["ps_bytes"] = str(bytes_per_ps(placement, master.sizes))


def _remove(master: Master, change: ShapeDiff, details: dict) -> None:
    if not change.remove:
        return
    t0 = master.clock.now()
    leaving = [master.nodes.get(s.name) for s in change.remove]
    leaving = [n for n in leaving if n is not None and n.alive]
    for node in leaving:
        node.commands.append({"cmd": "stop"})
        node.status = Status.STOPPING
    lifecycle.wait_ended(master)
    for node in leaving:
        if node.role == NodeRole.WORKER:
            master.manager.release(node.name)
    details["remove_s"] = master.clock.now() - t0
