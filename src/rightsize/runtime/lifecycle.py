"""A job's life outside of plans: launch, checkpoint, recover from failures, finish.

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
- **The master dies**: see :meth:`Master._resume`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rightsize.core.ports import free_port
from rightsize.core.shape import ClusterShape, NodeRole, NodeSpec
from rightsize.core.spec import Strategy
from rightsize.runtime.checkpoint import KEEP_VERSIONS
from rightsize.runtime.errors import Interrupted, JobFailed
from rightsize.runtime.nodes import Status
from rightsize.runtime.partition import partition_by_bytes
from rightsize.runtime.shards import ShardManager
from rightsize.runtime.state import CheckpointRow

if TYPE_CHECKING:
    from rightsize.runtime.master import Master

#: Seconds a node asked to stop may take before it is killed.
STOP_GRACE_S = 30.0


def names_on(placement: dict[str, str], ps: str) -> list[str]:
    return sorted(tensor for tensor, holder in placement.items() if holder == ps)


def bump_generation(master: Master) -> int:
    master.generation += 1
    master.store.update_job(generation=master.generation)
    return master.generation


def record(master: Master, action: str, reason: str, started_s: float, notes: dict | None = None,
           **details: Any) -> float:  # fmt: skip
    """Add a timeline row for the current shape; returns the transition time.

    ``details`` are the mechanism's measured parts; ``notes`` the plan's own details.
    """
    transition = master.clock.now() - started_s
    details = {k: round(v, 4) if isinstance(v, float) else v for k, v in details.items()}
    master.store.record_shape(master.time_s(), action, reason, master.shape, True, transition,
                              details, notes)  # fmt: skip
    return transition


# -- launching --------------------------------------------------------------------------
def launch_job(master: Master, shape: ClusterShape, row: CheckpointRow | None, action: str,
               reason: str, notes: dict | None = None) -> None:  # fmt: skip
    """Start every node of ``shape`` from checkpoint ``row`` (or from scratch).

    A node that dies while starting (say, OOM-killed) does not fail the launch:
    the control loop handles it like any failure (the policy sees the event).
    """
    t0 = master.clock.now()
    master.shape = shape
    try:
        _launch_nodes(master, shape, row)
    except Interrupted:
        reason += " (a node died while starting)"
    record(master, action, reason, t0, notes, nodes=len(shape.nodes))


def _launch_nodes(master: Master, shape: ClusterShape, row: CheckpointRow | None) -> None:
    if master.strategy == Strategy.PS:
        master.placement = partition_by_bytes(master.sizes, [n.name for n in shape.ps])
        paths = sorted(row.files.values()) if row else []
        for node in shape.ps:
            master.launch(node, {"names": names_on(master.placement, node.name), "paths": paths})
        startup = master.spec.runtime.startup_timeout_s
        master.wait_until(master.cluster_ready, startup, "the parameter servers starting")
        for node in shape.workers:
            master.launch(node)
        master.wait_until(lambda: all_registered(master, shape.workers), startup,
                          "the workers starting")  # fmt: skip
    else:
        start_group(master, shape, row)


def all_registered(master: Master, nodes) -> bool:
    """Every node has registered, and every parameter server among them is serving."""
    return all(
        (n := master.nodes.get(spec.name)) is not None
        and n.status == Status.RUNNING
        and (n.role != NodeRole.PS or n.generation == master.generation)
        for spec in nodes
    )


def start_group(master: Master, shape: ClusterShape, row: CheckpointRow | None) -> None:
    """Launch every allreduce rank with a fresh rendezvous, from checkpoint ``row``."""
    workers = sorted(shape.workers, key=lambda n: int(n.name.rsplit("-", 1)[-1]))
    rendezvous = f"tcp://127.0.0.1:{free_port()}"
    for rank, node in enumerate(workers):
        master.launch(node, {
            "rank": rank, "world": len(workers), "rendezvous": rendezvous,
            "checkpoint": row.files["model"] if row else None,
            "timeout_s": master.spec.runtime.startup_timeout_s,
            "checkpoint_root": str(master.ckpt.root),
        })  # fmt: skip
    master.wait_until(lambda: all_registered(master, workers),
                      master.spec.runtime.startup_timeout_s, "the ranks starting")  # fmt: skip


# -- checkpoints ----------------------------------------------------------------------------
def checkpoint(master: Master, stop: bool = False) -> int | None:
    """Save a consistent checkpoint and commit it; returns its version (None if none was made).

    ``stop`` (allreduce only) also ends the ranks right after they save.
    """
    version = master.version = master.version + 1
    snapshot, steps = master.manager.snapshot(), master.manager.batches_done
    timeout = master.spec.runtime.startup_timeout_s
    if master.strategy == Strategy.PS:
        files = {ps: str(master.ckpt.ps_file(version, ps)) for ps in set(master.placement.values())}
        holders = [master.nodes.get(ps) for ps in files]
        if not all(n is not None and n.alive for n in holders):
            return None  # a server is down; recovery comes first
        for node in holders:
            node.commands.append(
                {"cmd": "checkpoint", "version": version, "path": files[node.name]}
            )
        master.wait_until(lambda: all(n.has_ack("checkpointed", version=version) for n in holders),
                          timeout, f"checkpoint v{version}")  # fmt: skip
    else:
        files = {"model": str(master.ckpt.model_file(version))}
        ranks = master.nodes.alive(NodeRole.WORKER)
        for node in ranks:
            node.commands.append({"cmd": "checkpoint", "version": version})
            if stop:
                node.commands.append({"cmd": "stop"})
                node.status = Status.STOPPING
        saved = lambda: any(n.has_ack("checkpointed", version=version) for n in ranks)  # noqa: E731
        master.wait_until(saved, timeout, f"checkpoint v{version}")
    commit(master, version, snapshot, files, steps)
    return version


def commit(master: Master, version: int, snapshot: dict, files: dict, steps: int) -> None:
    row = CheckpointRow(version, master.time_s(), snapshot, files, dict(master.placement), steps)
    master.store.commit_checkpoint(row)
    keep = set(master.store.checkpoint_versions()[-KEEP_VERSIONS:])
    master.store.forget_checkpoints(keep)
    master.ckpt.prune(keep)
    for node in master.nodes.alive():
        node.pop_acks("checkpointed", version=version)


# -- failures ---------------------------------------------------------------------------------
def recover(master: Master) -> None:
    """Bring back every node of the shape that died (and was not already relaunched),
    and finish a parameter-server restore that another death interrupted."""
    in_shape = {n.name: n for n in master.shape.nodes}
    dead = sorted(name for name in in_shape if not _alive(master, name))
    failed, master.to_recover = master.to_recover & set(dead), set()
    # leases stay closed from the start of a restore to its end: closed here means a
    # restore was interrupted (a worker died while the servers reloaded) and must be redone
    unfinished_restore = master.strategy == Strategy.PS and not master.leasing
    if not dead and not unfinished_restore:
        return
    for name in failed:
        master.restarts[name] = master.restarts.get(name, 0) + 1
        if master.restarts[name] > master.spec.runtime.max_restarts:
            raise JobFailed(
                f"{name} failed {master.restarts[name]} times (runtime.max_restarts is "
                f"{master.spec.runtime.max_restarts}); see {master.ckpt.root / 'logs' / name}.log"
            )
    reason = f"{', '.join(dead)} died" if dead else "an interrupted restore"
    if master.strategy == Strategy.ALLREDUCE:
        restart_group(master, master.shape, reason, planned=False)
    elif unfinished_restore or any(in_shape[name].role == NodeRole.PS for name in dead):
        restore_ps(master, reason)
    relaunch_workers(master, [in_shape[n] for n in dead if in_shape[n].role == NodeRole.WORKER],
                     reason)  # fmt: skip


def _alive(master: Master, name: str) -> bool:
    node = master.nodes.get(name)
    return node is not None and node.alive


def relaunch_workers(master: Master, workers: list[NodeSpec], reason: str,
                     own_row: bool = True) -> None:  # fmt: skip
    """Relaunch dead PS-mode workers; the others keep training meanwhile.

    ``own_row``: record the relaunch in the timeline (not when it is part of a plan,
    which records itself).
    """
    workers = [w for w in workers if not _alive(master, w.name)]
    if not workers or master.strategy != Strategy.PS:
        return
    t0 = master.clock.now()
    for spec in workers:
        master.manager.release(spec.name)
        master.launch(spec)
    master.wait_until(lambda: all_registered(master, workers),
                      master.spec.runtime.startup_timeout_s, "relaunched workers starting")  # fmt: skip
    if own_row:
        record(master, "relaunch_worker", reason, t0, nodes=len(workers))


def restore_ps(master: Master, reason: str, respec: dict[str, NodeSpec] | None = None) -> None:
    """Every parameter server back to the latest committed checkpoint, dead ones relaunched."""
    t0 = master.clock.now()
    master.leasing = False
    generation = bump_generation(master)
    row = master.store.latest_checkpoint()
    master.manager = ShardManager(master.plan, row.shards if row else None)
    for worker in master.nodes.alive(NodeRole.WORKER):
        worker.commands.append({"cmd": "reset"})
    paths = sorted(row.files.values()) if row else []
    for spec in master.shape.ps:
        names = names_on(master.placement, spec.name)
        node = master.nodes.get(spec.name)
        if node is None or not node.alive:
            master.launch((respec or {}).get(spec.name, spec), {"names": names, "paths": paths})
        else:
            node.commands.append({"cmd": "load", "generation": generation, "names": names,
                                  "paths": paths})  # fmt: skip
    master.wait_until(master.cluster_ready, master.spec.runtime.startup_timeout_s,
                      "the parameter servers restoring")  # fmt: skip
    master.leasing = True
    where = f"checkpoint v{row.version}" if row else "the start (no checkpoint yet)"
    record(master, "restore_ps", f"{reason}; restored from {where}", t0,
           checkpoint=row.version if row else 0)  # fmt: skip


def restart_group(master: Master, shape: ClusterShape, reason: str, planned: bool,
                  action: str = "restart_group") -> None:  # fmt: skip
    """Allreduce: checkpoint (if every rank is alive), end the ranks, start ``shape``'s ranks."""
    t0 = master.clock.now()
    if planned:
        checkpoint(master, stop=True)
        wait_ended(master)
    for node in master.nodes.alive(NodeRole.WORKER):
        master.stop_node(node.name)
    row = master.store.latest_checkpoint()
    master.manager = ShardManager(master.plan, row.shards if row else None)
    bump_generation(master)
    master.shape = shape
    start_group(master, shape, row)
    where = f"checkpoint v{row.version}" if row else "the start"
    record(master, action, f"{reason}; restarted from {where}", t0,
           world=shape.n_workers)  # fmt: skip


# -- the end ------------------------------------------------------------------------------------
def finish(master: Master) -> None:
    """Stop the workers, take a final checkpoint (it holds the update logs the report
    checks), then stop the servers. Workers go first so that the shard queues are final
    when they are snapshotted: a job ended early (``steps``) has no worker still training."""
    if master.strategy == Strategy.PS:
        _stop_all(master, master.nodes.alive(NodeRole.WORKER))
        checkpoint(master)
        _stop_all(master, master.nodes.alive(NodeRole.PS))
    else:
        checkpoint(master, stop=True)
        wait_ended(master)


def _stop_all(master: Master, nodes: list) -> None:
    for node in nodes:
        node.commands.append({"cmd": "stop"})
        node.status = Status.STOPPING
    wait_ended(master)


def wait_ended(master: Master) -> None:
    """Wait for the nodes asked to stop to exit; kill those that take longer than the grace."""
    stopping = [n for n in master.nodes.by_name.values() if n.status == Status.STOPPING]
    try:
        master.wait_until(lambda: all(n.status == Status.DEAD for n in stopping), STOP_GRACE_S,
                          "the nodes stopping")  # fmt: skip
    except JobFailed:  # too slow: killed below
        pass
    finally:
        for node in stopping:
            master.stop_node(node.name)
