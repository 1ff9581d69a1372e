"""A job's life outside of plans: launch, checkpoint, recover from failures, finish.

Each operation reads and moves the job's state (:class:`jobstate.JobState`) and
touches the world only through the job's ports (:mod:`ports`, composed by
:mod:`steps`): launching and stopping processes, serving nodes while it waits, the
state file and the clock.

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
- **The master dies**: see :meth:`master.Master.run` (a rerun resumes).
"""

from __future__ import annotations

from rightsize.core.shape import ClusterShape, NodeRole, NodeSpec
from rightsize.core.spec import Strategy
from rightsize.runtime.errors import Interrupted, StopRequested
from rightsize.runtime.jobstate import Phase
from rightsize.runtime.protocol import AckKind, Checkpoint, Load, PSConfig, RankConfig, Reset, Stop
from rightsize.runtime.records import TimelineAction
from rightsize.runtime.script_group import ScriptGroup, rank_order
from rightsize.runtime.state import CheckpointRow
from rightsize.runtime.steps import Steps


class Lifecycle:
    """Launch, checkpoint, recover and finish one job, through ``steps``."""

    def __init__(self, steps: Steps, group: ScriptGroup) -> None:
        self.steps, self.group = steps, group
        self.job, self.clock, self.settings = steps.job, steps.clock, steps.settings
        self.timeline = steps.timeline

    # -- launching ----------------------------------------------------------------------
    def launch_job(self, shape: ClusterShape, row: CheckpointRow | None) -> str:
        """Start every node of ``shape`` from checkpoint ``row`` (or from scratch).

        A node that dies while starting (say, OOM-killed) does not fail the launch: the
        control loop handles it like any failure (the policy sees the event). Returns a
        note for the timeline's reason ("" when every node started).
        """
        job = self.job
        job.take_shape(shape)
        try:
            if job.script is not None:
                self.group.start_group(shape, self.clock.now())
            elif job.strategy == Strategy.PS:
                self._launch_ps_job(shape, row)
            else:
                self.start_group(shape, row)
        except StopRequested:
            raise
        except Interrupted:
            job.move_to(Phase.TRAINING)  # recovery takes it from here
            return " (a node died while starting)"
        job.move_to(Phase.TRAINING)
        return ""

    def _launch_ps_job(self, shape: ClusterShape, row: CheckpointRow | None) -> None:
        job = self.job
        job.place_on([n.name for n in shape.ps])
        paths = tuple(sorted(row.files.values())) if row else ()
        servers = [(n, PSConfig(job.generation, job.names_on(n.name), paths)) for n in shape.ps]
        self.steps.start_nodes(servers, "the parameter servers starting")
        self.steps.wait_until(job.cluster_ready, self.settings.startup_timeout_s,
                              "the parameter servers loading")  # fmt: skip
        self.steps.start_nodes([(n, None) for n in shape.workers], "the workers starting")

    def start_group(self, shape: ClusterShape, row: CheckpointRow | None) -> None:
        """Launch every allreduce rank with a fresh rendezvous, from checkpoint ``row``."""
        job = self.job
        workers = rank_order(shape)
        rendezvous = self.steps.nodes.open_rendezvous(len(workers))
        ranks = [
            (node, RankConfig(job.generation, rank, len(workers), rendezvous,
                              row.files["model"] if row else None,
                              self.settings.startup_timeout_s, self.steps.ports.ckpt.root))
            for rank, node in enumerate(workers)
        ]  # fmt: skip
        self.steps.start_nodes(ranks, "the ranks starting")

    # -- checkpoints --------------------------------------------------------------------------
    def checkpoint(self, stop: bool = False) -> int | None:
        """Save a consistent checkpoint and commit it; returns its version (None if none was
        made: the job is not training, or a server is down and recovery comes first).

        ``stop`` (allreduce only) also ends the ranks right after they save.
        """
        job, ckpt = self.job, self.steps.ports.ckpt
        if job.phase not in (Phase.TRAINING, Phase.FINISHING) or job.script is not None:
            return None  # a script checkpoints itself
        timeout = self.settings.startup_timeout_s
        if job.strategy == Strategy.PS:
            holders = [job.nodes.get(ps) for ps in sorted(set(job.placement.values()))]
            if not all(n is not None and n.alive for n in holders):
                return None
            version = job.next_version()
            snapshot, steps = job.shards.snapshot(), job.shards.batches_done
            files = {n.name: ckpt.ps_file(version, n.name) for n in holders}
            for node in holders:
                node.commands.append(Checkpoint(version, files[node.name]))
            self.steps.wait_until(
                lambda: all(n.has_ack(AckKind.CHECKPOINTED, version=version) for n in holders),
                timeout, f"checkpoint v{version}",
            )  # fmt: skip
        else:
            ranks = job.nodes.alive(NodeRole.WORKER)
            version = job.next_version()
            snapshot, steps = job.shards.snapshot(), job.shards.batches_done
            files = {"model": ckpt.model_file(version)}
            for node in ranks:
                node.commands.append(Checkpoint(version))
                if stop:
                    node.commands.append(Stop())
                    node.mark_stopping()
            self.steps.wait_until(
                lambda: any(n.has_ack(AckKind.CHECKPOINTED, version=version) for n in ranks),
                timeout, f"checkpoint v{version}",
            )  # fmt: skip
        self.steps.commit(version, snapshot, files, steps)
        return version

    # -- failures -------------------------------------------------------------------------------
    def recover(self) -> None:
        """Bring back every node of the shape that died (and was not already relaunched), and
        finish a parameter-server restore that another death interrupted.

        Raises:
            NodeFailedTooOften: a node failed more often than ``runtime.max_restarts`` allows.
        """
        recovery = self.job.recovery(self.settings.max_restarts)
        if recovery is None:
            return
        if recovery.restart_group:
            self.restart_group(self.job.shape, recovery.reason, planned=False)
            return
        if recovery.restore_ps:
            self.restore_ps(recovery.reason)
        self.relaunch_workers(list(recovery.workers), recovery.reason)

    def relaunch_workers(self, workers: list[NodeSpec], reason: str,
                         own_row: bool = True) -> None:  # fmt: skip
        """Relaunch dead PS-mode workers; the others keep training meanwhile.

        ``own_row``: record the relaunch in the timeline (not when it is part of a plan,
        which records itself).
        """
        job = self.job
        workers = [w for w in workers if not job.nodes.is_alive(w.name)]
        if not workers or job.strategy != Strategy.PS:
            return
        t0 = self.clock.now()
        for spec in workers:
            job.shards.release(spec.name)
        self.steps.start_nodes([(w, None) for w in workers], "relaunched workers starting")
        if own_row:
            self.steps.record(TimelineAction.RELAUNCH_WORKER, reason, t0, nodes=len(workers))

    def restore_ps(self, reason: str, respec: dict[str, NodeSpec] | None = None) -> None:
        """Every parameter server back to the latest committed checkpoint, dead ones
        relaunched (with ``respec``'s resources where given).

        The phase stays ``RESTORING`` until every server serves the new generation, so a
        restore that another death interrupts is redone by the next recovery.
        """
        job = self.job
        t0 = self.clock.now()
        job.move_to(Phase.RESTORING)
        generation = self.steps.bump_generation()
        row = self.timeline.latest_checkpoint()
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
                relaunch.append(((respec or {}).get(spec.name, spec),
                                 PSConfig(generation, names, paths)))  # fmt: skip
            else:
                node.commands.append(Load(generation, names, paths))
        self.steps.start_nodes(relaunch, "relaunched parameter servers starting")
        self.steps.wait_until(job.cluster_ready, self.settings.startup_timeout_s,
                              "the parameter servers restoring")  # fmt: skip
        job.move_to(Phase.TRAINING)
        where = f"checkpoint v{row.version}" if row else "the start (no checkpoint yet)"
        self.steps.record(TimelineAction.RESTORE_PS, f"{reason}; restored from {where}", t0,
                          checkpoint=row.version if row else 0)  # fmt: skip

    def restart_group(self, shape: ClusterShape, reason: str, planned: bool,
                      action: str = TimelineAction.RESTART_GROUP) -> None:  # fmt: skip
        """Allreduce: checkpoint (if every rank is alive), end the ranks, start ``shape``'s
        ranks. A script's group restarts by torchrun's contract instead (:mod:`script_group`)."""
        job = self.job
        if job.script is not None:
            self.group.restart(shape, reason, planned, action)
            return
        t0 = self.clock.now()
        if planned:
            self.checkpoint(stop=True)
            self.steps.wait_ended()
        for node in job.nodes.alive(NodeRole.WORKER):
            self.steps.nodes.stop(node.name)
        row = self.timeline.latest_checkpoint()
        job.roll_back(row.shards if row else None)
        self.steps.bump_generation()
        job.take_shape(shape)
        job.move_to(Phase.LAUNCHING)
        self.start_group(shape, row)
        job.move_to(Phase.TRAINING)
        where = f"checkpoint v{row.version}" if row else "the start"
        self.steps.record(action, f"{reason}; restarted from {where}", t0,
                          world=shape.n_workers)  # fmt: skip

    # -- the end ------------------------------------------------------------------------------
    def finish(self) -> None:
        """Stop the workers, take a final checkpoint (it holds the update logs the report
        checks), then stop the servers. Workers go first so that the shard queues are final
        when they are snapshotted: a job ended early (``steps``) has no worker still
        training."""
        job = self.job
        job.move_to(Phase.FINISHING)
        if job.script is not None:
            pass  # every rank exited 0: the script finished
        elif job.strategy == Strategy.PS:
            self.steps.stop_all(job.nodes.alive(NodeRole.WORKER))
            if self.checkpoint() is None:
                raise Interrupted("the final checkpoint (a server is down)")
            self.steps.stop_all(job.nodes.alive(NodeRole.PS))
        else:
            self.checkpoint(stop=True)
            self.steps.wait_ended()
        job.move_to(Phase.FINISHED)
