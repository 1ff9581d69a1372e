"""A job's life outside of plans: launch, checkpoint, recover from failures, finish.

Each operation reads and moves the job's state (:class:`jobstate.JobState`,
``master.job``) and uses the master only as a mechanism: launching and stopping
processes, serving nodes while it waits (:meth:`Master.wait_until`), the state
file and the clock.

- **Checkpoint** (DLRover §5.3: "Elastic Trainer periodically checkpoints
  parameters, TODO and DOING shard queues"): the master snapshots the shard
  queues first, then asks every parameter server (allreduce: every rank, which
  agree on a step; rank 0 writes) to save; the version is committed to the
  state file, with that snapshot, once every file is on disk. Because the
  snapshot is taken first, it never claims a batch the saved parameters lack.
- **A worker dies**: its lease returns to TODO and it is relaunched; the others
  go on.
- **A parameter server dies**: every server reloads the latest committed
  checkpoint (the dead one relaunched) under a new cluster generation, the
  shard queues roll back to that checkpoint's snapshot, workers drop their
  leases. Batches applied after the checkpoint are trained again; batches some
  servers had already applied in the checkpoint are deduplicated by key.
- **An allreduce rank dies**, or the number of ranks changes: the group restarts
  from the latest checkpoint, as torchrun does.
- **The master dies**: see :meth:`Master.run` (a rerun resumes).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rightsize.core.shape import ClusterShape, NodeRole, NodeSpec
from rightsize.core.spec import Strategy
from rightsize.runtime import script_group
from rightsize.runtime.allowance import startup_resources
from rightsize.runtime.capacity import launch_wave
from rightsize.runtime.checkpoint import KEEP_VERSIONS
from rightsize.runtime.errors import Interrupted, JobFailed, StopRequested
from rightsize.runtime.jobstate import Phase
from rightsize.runtime.nodes import Status
from rightsize.runtime.protocol import (
    AckKind,
    Checkpoint,
    Load,
    PSConfig,
    RankConfig,
    Reset,
    ScriptConfig,
    Stop,
)
from rightsize.runtime.state import CheckpointRow

if TYPE_CHECKING:
    from rightsize.runtime.master import Master

#: Seconds a node asked to stop may take before it is killed.
STOP_GRACE_S = 30.0


def record(master: Master, action: str, reason: str, started_s: float, notes: dict | None = None,
           **details: Any) -> float:  # fmt: skip
    """Add a timeline row for the current shape; returns the transition time.

    ``details`` are the mechanism's measured parts; ``notes`` the plan's own details.
    """
    transition = master.clock.now() - started_s
    master.store.record_shape(master.time_s(), action, reason, master.job.shape, True, transition,
                              _rounded(details), notes)  # fmt: skip
    return transition


def _rounded(details: dict[str, Any]) -> dict[str, Any]:
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in details.items()}


def bump_generation(master: Master) -> int:
    generation = master.job.next_generation()
    master.store.update_job(generation=generation)
    return generation


# -- launching --------------------------------------------------------------------------
def start_nodes(master: Master,
                nodes: Sequence[tuple[NodeSpec, PSConfig | RankConfig | ScriptConfig | None]],
                what: str) -> None:  # fmt: skip
    """Launch ``nodes`` in waves of :func:`capacity.launch_wave`, each wave waiting until its
    nodes have registered (so a large shape never starts all its processes at once)."""
    wave = launch_wave(master.machine)
    for i in range(0, len(nodes), wave):
        batch = nodes[i : i + wave]
        startup = _startup_resources(master, [spec for spec, _ in batch])
        for spec, config in batch:
            master.launch(spec, config, startup.get(spec.name))
        names = [spec.name for spec, _ in batch]
        master.wait_until(lambda names=names: all_registered(master, names),
                          master.spec.runtime.startup_timeout_s, what)  # fmt: skip


def _startup_resources(master: Master, starting: list[NodeSpec]) -> dict:
    """What each starting node borrows from the idle CPU the job may hold (:mod:`allowance`):
    its budget alone on a machine, what it reserved under the service (:mod:`lease`)."""
    if not master.spec.runtime.startup_allowance:
        return {}
    held = sum((n.startup or n.spec.resources).cpu_cores for n in master.job.nodes.alive())
    return startup_resources(starting, held, master.lease.ceiling(master.spec.budget.resources),
                             master.backend.host_cpus)  # fmt: skip


def launch_job(master: Master, shape: ClusterShape, row: CheckpointRow | None) -> str:
    """Start every node of ``shape`` from checkpoint ``row`` (or from scratch).

    A node that dies while starting (say, OOM-killed) does not fail the launch: the
    control loop handles it like any failure (the policy sees the event). Returns a
    note for the timeline's reason ("" when every node started).
    """
    job = master.job
    job.shape = shape
    try:
        if job.script is not None:
            script_group.start_group(master, shape, master.clock.now())
        elif job.strategy == Strategy.PS:
            _launch_ps_job(master, shape, row)
        else:
            start_group(master, shape, row)
    except StopRequested:
        raise
    except Interrupted:
        job.move_to(Phase.TRAINING)  # recovery takes it from here
        return " (a node died while starting)"
    job.move_to(Phase.TRAINING)
    return ""


def _launch_ps_job(master: Master, shape: ClusterShape, row: CheckpointRow | None) -> None:
    job = master.job
    job.place_on([n.name for n in shape.ps])
    paths = tuple(sorted(row.files.values())) if row else ()
    servers = [(n, PSConfig(job.generation, job.names_on(n.name), paths)) for n in shape.ps]
    start_nodes(master, servers, "the parameter servers starting")
    master.wait_until(job.cluster_ready, master.spec.runtime.startup_timeout_s,
                      "the parameter servers loading")  # fmt: skip
    start_nodes(master, [(n, None) for n in shape.workers], "the workers starting")


def all_registered(master: Master, names: Sequence[str]) -> bool:
    """Every named node has registered, and every parameter server among them serves (has
    loaded its share: a repartition must not halt the workers while a new server is still
    building its store — DLRover §5.3: "workers do not wait for the creation and
    initialization of new PS")."""
    return all(
        (n := master.job.nodes.get(name)) is not None
        and n.status == Status.RUNNING
        and (n.role != NodeRole.PS or n.generation is not None)
        for name in names
    )


def start_group(master: Master, shape: ClusterShape, row: CheckpointRow | None) -> None:
    """Launch every allreduce rank with a fresh rendezvous, from checkpoint ``row``."""
    job = master.job
    workers = sorted(shape.workers, key=lambda n: int(n.name.rsplit("-", 1)[-1]))
    rendezvous = master.open_rendezvous(len(workers))
    ranks = [
        (node, RankConfig(job.generation, rank, len(workers), rendezvous,
                          row.files["model"] if row else None,
                          master.spec.runtime.startup_timeout_s, master.ckpt.root))
        for rank, node in enumerate(workers)
    ]  # fmt: skip
    start_nodes(master, ranks, "the ranks starting")


# -- checkpoints ----------------------------------------------------------------------------
def checkpoint(master: Master, stop: bool = False) -> int | None:
    """Save a consistent checkpoint and commit it; returns its version (None if none was made:
    the job is not training, or a server is down and recovery comes first).

    ``stop`` (allreduce only) also ends the ranks right after they save.
    """
    job = master.job
    if job.phase not in (Phase.TRAINING, Phase.FINISHING) or job.script is not None:
        return None  # a script checkpoints itself
    timeout = master.spec.runtime.startup_timeout_s
    if job.strategy == Strategy.PS:
        holders = [job.nodes.get(ps) for ps in sorted(set(job.placement.values()))]
        if not all(n is not None and n.alive for n in holders):
            return None
        version = job.next_version()
        snapshot, steps = job.shards.snapshot(), job.shards.batches_done
        files = {n.name: master.ckpt.ps_file(version, n.name) for n in holders}
        for node in holders:
            node.commands.append(Checkpoint(version, files[node.name]))
        master.wait_until(
            lambda: all(n.has_ack(AckKind.CHECKPOINTED, version=version) for n in holders),
            timeout, f"checkpoint v{version}",
        )  # fmt: skip
    else:
        ranks = job.nodes.alive(NodeRole.WORKER)
        version = job.next_version()
        snapshot, steps = job.shards.snapshot(), job.shards.batches_done
        files = {"model": master.ckpt.model_file(version)}
        for node in ranks:
            node.commands.append(Checkpoint(version))
            if stop:
                node.commands.append(Stop())
                node.mark_stopping()
        master.wait_until(
            lambda: any(n.has_ack(AckKind.CHECKPOINTED, version=version) for n in ranks),
            timeout, f"checkpoint v{version}",
        )  # fmt: skip
    commit(master, version, snapshot, files, steps)
    return version


def commit(master: Master, version: int, snapshot: dict, files: dict, steps: int) -> None:
    job = master.job
    row = CheckpointRow(version, master.time_s(), snapshot, files, dict(job.placement), steps)
    master.store.commit_checkpoint(row)
    keep = set(master.store.checkpoint_versions()[-KEEP_VERSIONS:])
    master.store.forget_checkpoints(keep)
    master.ckpt.prune(keep)
    for node in job.nodes.alive():
        node.pop_acks(AckKind.CHECKPOINTED, version=version)


# -- failures ---------------------------------------------------------------------------------
def recover(master: Master) -> None:
    """Bring back every node of the shape that died (and was not already relaunched), and
    finish a parameter-server restore that another death interrupted.

    Raises:
        JobFailed: a node failed more often than ``runtime.max_restarts`` allows.
    """
    recovery = master.job.recovery(master.spec.runtime.max_restarts)
    if recovery is None:
        return
    if recovery.restart_group:
        restart_group(master, master.job.shape, recovery.reason, planned=False)
        return
    if recovery.restore_ps:
        restore_ps(master, recovery.reason)
    relaunch_workers(master, list(recovery.workers), recovery.reason)


def relaunch_workers(master: Master, workers: list[NodeSpec], reason: str,
                     own_row: bool = True) -> None:  # fmt: skip
    """Relaunch dead PS-mode workers; the others keep training meanwhile.

    ``own_row``: record the relaunch in the timeline (not when it is part of a plan,
    which records itself).
    """
    job = master.job
    workers = [w for w in workers if not job.nodes.is_alive(w.name)]
    if not workers or job.strategy != Strategy.PS:
        return
    t0 = master.clock.now()
    for spec in workers:
        job.shards.release(spec.name)
    start_nodes(master, [(w, None) for w in workers], "relaunched workers starting")
    if own_row:
        record(master, "relaunch_worker", reason, t0, nodes=len(workers))


def restore_ps(master: Master, reason: str, respec: dict[str, NodeSpec] | None = None) -> None:
    """Every parameter server back to the latest committed checkpoint, dead ones relaunched
    (with ``respec``'s resources where given).

    The phase stays ``RESTORING`` until every server serves the new generation, so a
    restore that another death interrupts is redone by the next recovery.
    """
    job = master.job
    t0 = master.clock.now()
    job.move_to(Phase.RESTORING)
    generation = bump_generation(master)
    row = master.store.latest_checkpoint()
    job.roll_back(row.shards if row else None)
    for worker in job.nodes.alive(NodeRole.WORKER):
        worker.commands.append(Reset())
    paths = tuple(sorted(row.files.values())) if row else ()
    job.place_on([n.name for n in job.shape.ps])
    relaunch = []
    for spec in job.shape.ps:
        names = job.names_on(spec.name)
        node = job.nodes.get(spec.name)
        if node is None or not node.alive:
            relaunch.append(((respec or {}).get(spec.name, spec), PSConfig(generation, names, paths)))
        else:
            node.commands.append(Load(generation, names, paths))
    start_nodes(master, relaunch, "relaunched parameter servers starting")
    master.wait_until(job.cluster_ready, master.spec.runtime.startup_timeout_s,
                      "the parameter servers restoring")  # fmt: skip
    job.move_to(Phase.TRAINING)
    where = f"checkpoint v{row.version}" if row else "the start (no checkpoint yet)"
    record(master, "restore_ps", f"{reason}; restored from {where}", t0,
           checkpoint=row.version if row else 0)  # fmt: skip


def restart_group(master: Master, shape: ClusterShape, reason: str, planned: bool,
                  action: str = "restart_group") -> None:  # fmt: skip
    """Allreduce: checkpoint (if every rank is alive), end the ranks, start ``shape``'s ranks.
    A script's group restarts by torchrun's contract instead (:mod:`script_group`)."""
    job = master.job
    if job.script is not None:
        script_group.restart(master, shape, reason, planned, action)
        return
    t0 = master.clock.now()
    if planned:
        checkpoint(master, stop=True)
        wait_ended(master)
    for node in job.nodes.alive(NodeRole.WORKER):
        master.stop_node(node.name)
    row = master.store.latest_checkpoint()
    job.roll_back(row.shards if row else None)
    bump_generation(master)
    job.shape = shape
    job.move_to(Phase.LAUNCHING)
    start_group(master, shape, row)
    job.move_to(Phase.TRAINING)
    where = f"checkpoint v{row.version}" if row else "the start"
    record(master, action, f"{reason}; restarted from {where}", t0,
           world=shape.n_workers)  # fmt: skip


# -- the end ------------------------------------------------------------------------------------
def finish(master: Master) -> None:
    """Stop the workers, take a final checkpoint (it holds the update logs the report
    checks), then stop the servers. Workers go first so that the shard queues are final
    when they are snapshotted: a job ended early (``steps``) has no worker still training."""
    job = master.job
    job.move_to(Phase.FINISHING)
    if job.script is not None:
        pass  # every rank exited 0: the script finished
    elif job.strategy == Strategy.PS:
        _stop_all(master, job.nodes.alive(NodeRole.WORKER))
        if checkpoint(master) is None:
            raise Interrupted("the final checkpoint (a server is down)")
        _stop_all(master, job.nodes.alive(NodeRole.PS))
    else:
        checkpoint(master, stop=True)
        wait_ended(master)
    job.move_to(Phase.FINISHED)


def _stop_all(master: Master, nodes: list) -> None:
    for node in nodes:
        node.commands.append(Stop())
        node.mark_stopping()
    wait_ended(master)


def wait_ended(master: Master) -> None:
    """Wait for the nodes asked to stop to exit; kill those that take longer than the grace."""
    stopping = [n for n in master.job.nodes.by_name.values() if n.status == Status.STOPPING]
    try:
        master.wait_until(lambda: all(n.status == Status.DEAD for n in stopping), STOP_GRACE_S,
                          "the nodes stopping")  # fmt: skip
    except JobFailed:  # too slow: killed below
        pass
    finally:
        for node in stopping:
            master.stop_node(node.name)
