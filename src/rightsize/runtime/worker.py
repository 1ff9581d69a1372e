"""The parameter-server worker: lease a shard, and for each batch pull, compute, push, report.

DLRover §5.2-5.3: a worker asks the master for a shard, reads its samples by
index, trains on them batch by batch against the parameter servers, reports,
and asks again. Each batch is one step:

1. find the embedding rows the batch needs (:class:`EmbeddingLookups`);
2. pull dense tensors and those rows from every PS at once;
3. forward and backward on the local model;
4. push the gradients, keyed ``(epoch, shard, batch)`` with the batch's sample
   indices, to every PS at once, and wait until every PS has answered;
5. report progress to the master (only now is the batch "done").

The master's replies steer the worker: a new cluster generation (PS addresses
and placement) is switched to before the next step; ``pause`` halts at the
next batch boundary with the lease kept (a PS repartition); ``reset`` drops the
lease at once (a restore after a failure: the master has rolled the queues
back); ``stop`` ends the process.
"""

from __future__ import annotations

import time
from contextlib import suppress
from dataclasses import dataclass

import torch

from rightsize.core.spec import SharedMemoryMode
from rightsize.runtime.model_io import EmbeddingLookups, gradients, layout_of, write_pulled
from rightsize.runtime.node_link import NodeContext
from rightsize.runtime.protocol import (
    ClusterView,
    Grant,
    Heartbeat,
    LeaseRequest,
    Pause,
    Progress,
    Reply,
    Reset,
    Resume,
    Stop,
)
from rightsize.runtime.psclient import InFlight, PSCluster, ResetLease
from rightsize.runtime.shards import Task
from rightsize.runtime.sharedmem import SharedMemory

#: Seconds between lease requests while TODO is empty but the epoch is not over.
LEASE_WAIT_S = 0.05
#: Seconds between heartbeats while halted by ``pause``.
HOLD_POLL_S = 0.1


class StopWorker(Exception):
    """The master told this worker to end."""


class Worker:
    """The loop of one PS-mode worker.

    ``cluster`` is ``None`` until the master sends one (a worker that registers while
    the servers restore gets none yet): without a cluster the worker asks for no
    lease, and the master grants none to a worker not in the job's generation.
    """

    def __init__(self, ctx: NodeContext, cluster: ClusterView | None) -> None:
        self.ctx = ctx
        self.workload = ctx.workload()
        self.model = self.workload.make_model(seed=ctx.spec.training.seed)
        self.layout = layout_of(self.model)
        self.lookups = EmbeddingLookups(self.layout)
        self.cluster: PSCluster | None = None
        spec = ctx.spec
        self.overlap = spec.runtime.overlap
        #: slots for servers on this host (:mod:`sharedmem`); None: sockets only
        self.shared = (SharedMemory.for_node(spec.name, ctx.name)
                       if spec.runtime.shared_memory == SharedMemoryMode.AUTO else None)  # fmt: skip
        self.paused = False
        if cluster is not None:
            self.switch(cluster)

    def run(self) -> int:
        leased: _Leased | None = None
        try:
            while True:
                if leased is None:
                    reply, tensors = self.ask_for_task()
                    if reply.lease is None:
                        time.sleep(LEASE_WAIT_S)
                        continue
                    leased = _Leased(reply.lease, tensors[0])
                try:
                    leased = self.train(leased.grant, leased.shard_indices)
                except ResetLease:  # whatever is in flight is given up (and deduplicated if
                    self.cluster.abandon()  # it is applied: the batch is trained again)
                    leased = None
        except StopWorker:
            return 0
        finally:
            if self.cluster is not None:
                self.cluster.close()

    def ask_for_task(self) -> tuple[Reply, list[torch.Tensor]]:
        """The master's reply to a lease request (a heartbeat while there is no cluster),
        its commands obeyed.

        Between tasks nothing is in flight, so a ``reset`` (the master rolled its
        parameter servers back to a checkpoint) has nothing to undo here; a task
        leased in the same reply comes from the rolled-back shard queues (the master
        queues resets after rebuilding them), so it is kept.
        """
        with suppress(ResetLease):
            if self.paused:
                self.hold()
        body = LeaseRequest() if self.cluster is not None else Heartbeat()
        reply, tensors = self.ctx.call(body)
        with suppress(ResetLease):
            self.follow(reply)
        return reply, tensors

    # -- training -----------------------------------------------------------------
    def train(self, grant: Grant, shard_indices: torch.Tensor) -> _Leased | None:
        """Train the task's batches from ``grant.next_batch``; returns the next task if the
        master leased one with its answer to the last batch.

        Each batch's pull goes out before it is computed, with the previous batch's push.
        With ``runtime.overlap`` the pull of batch b+1 goes before the push of b, so each
        server answers it at once and applies b while this worker computes b+1 (b+1 sees
        every push before b: one step stale); b is reported done once its push is
        answered, while the servers serve b+1's pull. Without it the push goes first and
        the pull sees it applied, as in a step-by-step loop. Either way progress is
        reported only for pushes every server has answered.
        """
        task = grant.task
        batches = _Batches(shard_indices, self.ctx.spec.batch_size)
        ready = self.prepare(task, grant.next_batch, batches)
        unreported: list[_Pushed] = []
        leased = None
        while ready is not None:
            started = time.monotonic()
            loss, grads = self.compute(ready)
            after = ready.batch + 1
            if self.overlap:
                following = self.prepare(task, after, batches)
                unreported.append(self.push(ready, grads, loss))
            else:
                unreported.append(self.push(ready, grads, loss))
                following = self.prepare(task, after, batches)
            keep = 1 if self.overlap else 0  # overlap: b's push stays out while b+1 computes
            while len(unreported) > keep or (unreported and self.paused):
                leased = self.confirm(unreported.pop(0), pushes_out=len(unreported))
            if self.paused:  # halted at a batch boundary: every push answered and reported
                self.forget(following)
                self.hold()
                following = self.prepare(task, after, batches)
            ready = following
            self.ctx.busy_s += time.monotonic() - started
        while unreported:
            leased = self.confirm(unreported.pop(0), pushes_out=len(unreported))
        if self.paused:
            self.hold()
        return leased

    def prepare(self, task: Task, batch: int, batches: _Batches) -> _Ready | None:
        """Batch ``batch`` of ``task`` read, its embedding ids found, its pull sent
        (None past the task's end)."""
        if batch >= task.end:
            return None
        indices = batches.indices(batch)
        inputs, target = self.workload.batch(indices)
        ids = self.lookups.discover(inputs)
        pull = self.cluster.send_pull(ids)
        return _Ready(task, batch, indices, inputs, target, self.cluster, pull)

    def compute(self, ready: _Ready) -> tuple[torch.Tensor, tuple[dict, dict]]:
        """Forward and backward on the pulled values: the loss and the gradients."""
        if ready.cluster is not self.cluster:  # switched since the pull went out
            ready.pull = self.cluster.send_pull(ready.pull.ids)
            ready.cluster = self.cluster
        dense, rows = self.cluster.pulled(ready.pull, self.check_master)
        write_pulled(self.layout, dense, rows)  # the one copy of a pulled value
        self.cluster.release(ready.pull)
        self.lookups.guard(
            {name: value[0] for name, value in rows.items()},
            lambda table, missing: self.cluster.fetch_rows(table, missing, self.check_master),
        )
        try:
            loss = self.workload.loss_fn(self.model(*ready.inputs), ready.target)
            loss.backward()
        finally:
            self.lookups.release()
        return loss.detach(), gradients(self.layout, self.lookups)

    def push(self, ready: _Ready, grads: tuple[dict, dict], loss: torch.Tensor) -> _Pushed:
        key = (ready.task.epoch, ready.task.shard, ready.batch)
        request = self.cluster.send_push(key, ready.indices, *grads)
        return _Pushed(ready.task, ready.batch, len(ready.indices), loss, request, time.monotonic())

    def confirm(self, pushed: _Pushed, pushes_out: int) -> _Leased | None:
        """Wait until every server has answered the push, then report the batch done;
        returns the next task if the master leased one with its answer (to a finish).

        Raises:
            ResetLease: the master no longer holds this lease for us (or reset it), or it
                moved us to another cluster while ``pushes_out`` later pushes were in flight
                (their fate is unknown: the lease is trained again from what was reported).
        """
        self.cluster.wait(pushed.request, self.check_master)
        self.ctx.steps += 1
        self.ctx.counted_at = pushed.computed_s  # not now: confirms lag by a step, and bunch
        self.ctx.samples += pushed.samples
        self.ctx.loss_sum += float(pushed.loss)
        self.ctx.loss_n += 1
        answer, tensors = self.ctx.call(Progress(pushed.task, pushed.batch + 1))
        if self.follow(answer) and pushes_out:
            raise ResetLease("the cluster changed with a push in flight")
        if not answer.accepted:
            raise ResetLease("the master no longer holds this lease for us")
        return _Leased(answer.lease, tensors[0]) if answer.lease is not None else None

    def forget(self, ready: _Ready | None) -> None:
        if ready is not None:
            ready.cluster.forget(ready.pull)

    # -- following the master -----------------------------------------------------------
    def follow(self, reply: Reply) -> bool:
        """Obey the reply's commands in order, after switching to the cluster it names.

        Returns:
            True if the cluster changed.
        """
        switched = reply.cluster is not None and (
            self.cluster is None or reply.cluster.generation != self.cluster.generation
        )
        if switched:
            self.switch(reply.cluster)
        reset = False
        for command in reply.commands:  # all of them: commands are sent once
            if isinstance(command, Pause):
                self.paused = True
            elif isinstance(command, Resume):
                self.paused = False
            elif isinstance(command, Reset):
                reset = True
            elif isinstance(command, Stop):
                raise StopWorker
        if reset:
            raise ResetLease("reset by the master")
        return switched

    def switch(self, view: ClusterView) -> None:
        new = PSCluster(self.ctx.zmq, self.ctx.counters, view, self.layout.params,
                        self.layout.sparse, self.shared, self.note)  # fmt: skip
        old, self.cluster = self.cluster, new
        self.ctx.generation = self.cluster.generation
        if old is not None:
            old.close()

    def note(self, text: str) -> None:
        """A line in this node's log."""
        print(f"{self.ctx.name}: {text}", flush=True)

    def hold(self) -> None:
        """Halted at a batch boundary until ``resume`` (or ``reset``/``stop``)."""
        while self.paused:
            self.follow(self.ctx.call(Heartbeat(paused=True))[0])
            if self.paused:
                time.sleep(HOLD_POLL_S)

    def check_master(self) -> None:
        """Called while a parameter server is slow to answer: a reset, a stop or a new
        cluster ends the wait (the request is retried, or deduplicated, later)."""
        if self.follow(self.ctx.call(Heartbeat())[0]):
            raise ResetLease("the cluster changed during a request")


class _Batches:
    """A leased shard's sample indices, cut into batches."""

    def __init__(self, shard_indices: torch.Tensor, batch_size: int) -> None:
        self.shard_indices, self.batch_size = shard_indices, batch_size

    def indices(self, batch: int) -> torch.Tensor:
        size = self.batch_size
        return self.shard_indices[batch * size : (batch + 1) * size]


@dataclass
class _Ready:
    """A batch whose inputs are read and whose pull is in flight to ``cluster``."""

    task: Task
    batch: int
    indices: torch.Tensor
    inputs: tuple
    target: torch.Tensor
    cluster: PSCluster
    pull: InFlight


@dataclass(frozen=True)
class _Leased:
    """A task the master leased, with its shard's sample indices."""

    grant: Grant
    shard_indices: torch.Tensor


@dataclass(frozen=True)
class _Pushed:
    """A batch whose gradients are on their way to every server, not yet reported."""

    task: Task
    batch: int
    samples: int
    loss: torch.Tensor
    request: InFlight
    computed_s: float  # when its compute ended (monotonic): the step's moment in the metrics


def run_worker(ctx: NodeContext) -> int:
    reply = ctx.register()
    worker = Worker(ctx, reply.cluster)
    with suppress(ResetLease):  # nothing is leased yet: a reset has nothing to undo
        worker.follow(reply)
    return worker.run()
