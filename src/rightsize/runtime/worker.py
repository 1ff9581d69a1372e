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

import torch
import zmq

from rightsize.runtime.model_io import EmbeddingLookups, gradients, layout_of, write_pulled
from rightsize.runtime.node import NodeContext
from rightsize.runtime.protocol import (
    ClusterView,
    Grant,
    Heartbeat,
    LeaseRequest,
    Pause,
    Progress,
    Pull,
    Push,
    Reply,
    Reset,
    Resume,
    Stop,
)
from rightsize.runtime.transport import Client

#: Seconds between lease requests while TODO is empty but the epoch is not over.
LEASE_WAIT_S = 0.05
#: Seconds between heartbeats while halted by ``pause``.
HOLD_POLL_S = 0.1
#: Seconds a worker waits on parameter servers before asking the master what is going on.
STALL_CHECK_S = 1.0


class ResetLease(Exception):
    """The master dropped this worker's lease (or the cluster changed under a request)."""


class StopWorker(Exception):
    """The master told this worker to end."""


class PSCluster:
    """Connections to one generation's parameter servers, and which tensors each holds."""

    def __init__(self, ctx: NodeContext, view: ClusterView, sparse: set[str]) -> None:
        self.generation = view.generation
        self.clients = {ps: Client(ctx.zmq, addr, ctx.counters) for ps, addr in view.servers.items()}
        placement = view.placement
        self.dense = {ps: tuple(sorted(n for n, p in placement.items() if p == ps and n not in sparse))
                      for ps in self.clients}  # fmt: skip
        self.tables = {ps: tuple(sorted(n for n, p in placement.items() if p == ps and n in sparse))
                       for ps in self.clients}  # fmt: skip
        self.owner = dict(placement)
        self.poller = zmq.Poller()
        self.by_socket = {}
        for ps, client in self.clients.items():
            self.poller.register(client.socket, zmq.POLLIN)
            self.by_socket[client.socket] = ps

    def pull(self, ids: dict[str, torch.Tensor], on_stall) -> tuple[dict, dict]:
        requests = {}
        for ps in self.clients:
            tables = tuple(t for t in self.tables[ps] if t in ids)
            requests[ps] = (Pull(self.generation, tables).to_header(), [ids[t] for t in tables])
        replies = self.exchange(requests, on_stall)
        dense, rows = {}, {}
        for ps, (header, tensors) in replies.items():
            count = len(header["dense"])
            dense.update(zip(header["dense"], tensors[:count], strict=True))
            tables = requests[ps][0]["tables"]
            rows.update((t, (ids[t], v)) for t, v in zip(tables, tensors[count:], strict=True))
        return dense, rows

    def push(self, key, indices: torch.Tensor, dense: dict, sparse: dict, on_stall) -> None:
        requests = {}
        for ps in self.clients:
            tensors = [indices] + [dense[n] for n in self.dense[ps]]
            for name in self.tables[ps]:
                tensors += list(sparse[name])
            header = Push(self.generation, key, self.dense[ps], self.tables[ps]).to_header()
            requests[ps] = (header, tensors)
        self.exchange(requests, on_stall)

    def fetch_rows(self, table: str, ids: torch.Tensor, on_stall) -> torch.Tensor:
        ps = self.owner[table]
        header = Pull(self.generation, (table,)).to_header()
        replies = self.exchange({ps: (header, [ids])}, on_stall)
        reply, tensors = replies[ps]
        return tensors[len(reply["dense"])]

    def exchange(self, requests: dict, on_stall) -> dict:
        """Send every request, wait for every reply; ``on_stall()`` runs while waiting long.

        Raises:
            Reset: a server answered ``stale`` (its generation is not ours).
        """
        for ps, (header, tensors) in requests.items():
            self.clients[ps].send(header, tensors)
        replies: dict[str, tuple] = {}
        while len(replies) < len(requests):
            events = dict(self.poller.poll(int(STALL_CHECK_S * 1000)))
            if not events:
                on_stall()
            for socket in events:
                ps = self.by_socket[socket]
                reply = self.clients[ps].receive()
                if reply is not None and ps in requests:
                    replies[ps] = reply
        if any(header.get("stale") for header, _ in replies.values()):
            raise ResetLease("a parameter server is on another generation")
        return replies

    def close(self) -> None:
        for client in self.clients.values():
            client.close()


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
        self.paused = False
        if cluster is not None:
            self.switch(cluster)

    def run(self) -> int:
        try:
            while True:
                reply, tensors = self.ask_for_task()
                if reply.lease is None:
                    time.sleep(LEASE_WAIT_S)
                    continue
                try:
                    self.train(reply.lease, tensors[0])
                except ResetLease:
                    continue
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
    def train(self, grant: Grant, shard_indices: torch.Tensor) -> None:
        task, batch_size = grant.task, self.ctx.spec.batch_size
        for batch in range(grant.next_batch, task.end):
            indices = shard_indices[batch * batch_size : (batch + 1) * batch_size]
            self.step((task.epoch, task.shard, batch), indices)
            answer, _ = self.ctx.call(Progress(task, batch + 1))
            self.follow(answer)
            if not answer.accepted:
                raise ResetLease("the master no longer holds this lease for us")
            if self.paused:
                self.hold()

    def step(self, key: tuple[int, int, int], indices: torch.Tensor) -> None:
        started = time.monotonic()
        inputs, target = self.workload.batch(indices)
        ids = self.lookups.discover(inputs)
        dense, rows = self.cluster.pull(ids, self.check_master)
        write_pulled(self.layout, dense, rows)
        self.lookups.guard(
            {name: value[0] for name, value in rows.items()},
            lambda table, missing: self.cluster.fetch_rows(table, missing, self.check_master),
        )
        try:
            loss = self.workload.loss_fn(self.model(*inputs), target)
            loss.backward()
        finally:
            self.lookups.release()
        dense_grads, sparse_grads = gradients(self.layout)
        self.cluster.push(key, indices, dense_grads, sparse_grads, self.check_master)
        self.ctx.steps += 1
        self.ctx.samples += len(indices)
        self.ctx.loss_sum += float(loss.detach())
        self.ctx.loss_n += 1
        self.ctx.busy_s += time.monotonic() - started

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
        old, self.cluster = self.cluster, PSCluster(self.ctx, view, self.layout.sparse)
        self.ctx.generation = self.cluster.generation
        if old is not None:
            old.close()

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


def run_worker(ctx: NodeContext) -> int:
    reply = ctx.register()
    worker = Worker(ctx, reply.cluster)
    with suppress(ResetLease):  # nothing is leased yet: a reset has nothing to undo
        worker.follow(reply)
    return worker.run()
