"""The master's answers to its nodes (register, heartbeat, lease, progress), from the job's state.

Every message carries the sender's name, pid, cluster generation and counters
(:mod:`protocol`); every answer may carry commands. A message from a process
the master does not know (a predecessor of a relaunched node) is told to stop.
Workers are steered by state rather than by one-off commands where they can
miss nothing: while the job is halted for a repartition every answer says
``pause``; a paused worker is answered ``resume`` once the halt is over; a
worker whose generation is not the job's — ``None`` included, a worker that has
no cluster yet — gets the current cluster with its answer as soon as every
server serves it, and is leased nothing until it works in it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass

import torch

from rightsize.core.shape import NodeRole, NodeSpec
from rightsize.core.spec import Strategy
from rightsize.runtime.clock import Clock
from rightsize.runtime.jobstate import JobState, Phase
from rightsize.runtime.nodes import NodeState, Status
from rightsize.runtime.protocol import (
    STOP_REPLY,
    FileEvent,
    FileReport,
    Grant,
    Heartbeat,
    LeaseRequest,
    Mark,
    Message,
    NodeConfig,
    Pause,
    Progress,
    PSConfig,
    RankConfig,
    Register,
    Reply,
    Resume,
    SampleRequest,
    Samples,
    ScriptConfig,
)
from rightsize.runtime.sample_ledger import LedgerError, StreamSpec
from rightsize.runtime.shards import StragglerRule


@dataclass
class NodeService:
    """Answers every node of ``job``; the master pumps messages through :meth:`handle`."""

    job: JobState
    spec_json: dict
    threads: Callable[[NodeSpec], int]
    straggler: StragglerRule
    clock: Clock
    #: keeps a script's sample ledger (the state file), before a rank hears back
    persist_ledger: Callable[[dict], None] = lambda _data: None

    def handle(self, message: Message) -> tuple[Reply, list[torch.Tensor]]:
        """The answer to one message, and the tensors it carries."""
        sender = message.sender
        node = self.job.nodes.get(sender.name)
        if node is None or node.status == Status.DEAD or sender.pid != node.pid:
            return STOP_REPLY, []
        node.heard(self.clock.now(), sender.stats)
        node.works_in(sender.generation)
        body = message.body
        if isinstance(body, Register):
            return self.register(node, body), []
        if isinstance(body, Heartbeat):
            node.acks.extend(body.acks)
            if node.role == NodeRole.PS:
                return Reply(node.take_commands()), []
            return self.worker_reply(node, paused=body.paused), []
        if isinstance(body, LeaseRequest):
            return self.lease(node)
        if isinstance(body, SampleRequest):
            return self.samples(node, body)
        if isinstance(body, FileReport):
            self.file(body)
            return self.worker_reply(node), []
        if isinstance(body, Mark):
            if self.job.script is not None:
                self.job.script.mark(body.kind, body.duration_s)
            return self.worker_reply(node), []
        return self.progress(node, body)

    def register(self, node: NodeState, body: Register) -> Reply:
        node.registered(self.clock.now(), body.address)
        config = NodeConfig(
            self.spec_json, self.threads(node.spec),
            ps=node.config if isinstance(node.config, PSConfig) else None,
            rank=node.config if isinstance(node.config, RankConfig) else None,
            script=node.config if isinstance(node.config, ScriptConfig) else None,
        )  # fmt: skip
        cluster = self.job.cluster_view() if node.role == NodeRole.WORKER else None
        # commands wait for the node's next message: a node obeys them once it runs its role
        # (a restore's Load sent to a server still starting was lost here, and the restore
        # waited for it until the startup timeout)
        return Reply(config=config, cluster=cluster)

    def worker_reply(self, node: NodeState, paused: bool = False, **extra) -> Reply:
        """Commands for a worker, with the pause/resume state and the cluster it should use."""
        node.set_paused(paused)
        commands = list(node.take_commands())
        if self.job.phase == Phase.HALTED:
            commands.append(Pause())
        elif node.paused:
            commands.append(Resume())
        view = self.job.cluster_view()
        cluster = view if view is not None and node.generation != view.generation else None
        return Reply(tuple(commands), cluster=cluster, **extra)

    def lease(self, node: NodeState) -> tuple[Reply, list[torch.Tensor]]:
        grant, tensors = self.grant(node)
        return self.worker_reply(node, lease=grant), tensors

    def grant(self, node: NodeState) -> tuple[Grant | None, list[torch.Tensor]]:
        """A task for ``node`` if leasing is open and it works in the job's cluster, with
        its shard's sample indices."""
        job = self.job
        in_cluster = node.generation == job.generation and (
            job.strategy != Strategy.PS or job.cluster_ready()
        )
        if not (job.leasing and in_cluster):
            return None, []
        peers = [job.speeds[n.name] for n in job.nodes.running(NodeRole.WORKER)
                 if n.name in job.speeds]  # fmt: skip
        fraction = self.straggler.fraction(job.speeds.get(node.name), peers)
        granted = job.shards.lease(node.name, fraction)
        if granted is None:
            return None, []
        task = granted.task
        indices = torch.from_numpy(job.plan.indices(task.epoch, task.shard))
        return Grant(task, granted.next_batch), [indices]

    def progress(self, node: NodeState, body: Progress) -> tuple[Reply, list[torch.Tensor]]:
        accepted, grant, tensors = False, None, []
        if node.generation == self.job.generation:
            shards = self.job.shards
            if body.done:
                accepted = shards.finish(node.name, body.task)
                if accepted and self.job.strategy == Strategy.PS:
                    # a PS worker's next task rides on this answer: one round trip, not two
                    grant, tensors = self.grant(node)
            else:
                accepted = shards.progress(node.name, body.task, body.next_batch)
        return self.worker_reply(node, accepted=accepted, lease=grant), tensors

    # -- a script's ranks (rightsize torchrun) ----------------------------------------------
    def samples(self, node: NodeState, body: SampleRequest) -> tuple[Reply, list[torch.Tensor]]:
        """A rank's indices of one step of its ElasticSampler (:mod:`sample_ledger`); no
        samples for a rank of an old group (it is being stopped) or a sampler that changed."""
        script = self.job.script
        if script is None or node.generation != self.job.generation:
            return self.worker_reply(node), []
        spec = StreamSpec(body.dataset_size, body.batch_size, body.seed, body.shuffle)
        try:
            indices, steps, end = script.ledger.step(body.stream, spec, body.epoch, body.step,
                                                     node.config.rank)  # fmt: skip
        except LedgerError as exc:
            print(f"error: {node.name}: {exc}", file=sys.stderr, flush=True)
            return self.worker_reply(node), []
        script.sampler_asked()
        reply = self.worker_reply(node, samples=Samples(steps, end))
        return reply, [torch.from_numpy(indices)]

    def file(self, body: FileReport) -> None:
        """A rank saved or loaded a checkpoint file, or its script ended (the ledger's
        checkpoints; the saves pace a restart's wait)."""
        script = self.job.script
        if script is None:
            return
        ledger = script.ledger
        applied = {int(s): {int(e): int(n) for e, n in epochs.items()}
                   for s, epochs in body.applied.items()}  # fmt: skip
        stat = (body.mtime_ns, body.size) if body.mtime_ns is not None else None
        if body.event == FileEvent.SAVING:
            ledger.saving(body.path, applied)
        elif body.event == FileEvent.SAVED:
            ledger.saved(body.path, stat)
            script.saved(self.clock.now())
        elif body.event == FileEvent.LOADED:
            ledger.loaded(body.path, stat)
        else:
            ledger.reached(applied)
        # what a file holds must outlive this master before the rank goes on writing it
        self.persist_ledger(ledger.to_dict())
