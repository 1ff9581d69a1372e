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
from typing import Any

import torch
import zmq

from rightsize.runtime.model_io import EmbeddingLookups, gradients, layout_of, write_pulled
from rightsize.runtime.node import NodeContext
from rightsize.runtime.shards import Task
from rightsize.runtime.transport import Client

#: Seconds between lease requests while TODO is empty but the epoch is not over.
LEASE_WAIT_S = 0.05
#: Seconds between heartbeats while halted by ``pause``.
HOLD_POLL_S = 0.1
#: Seconds a worker waits on parameter servers before asking the master what is going on.
STALL_CHECK_S = 1.0


class Reset(Exception):
    """The master dropped this worker's lease (or the cluster changed under a request)."""


class Stop(Exception):
    """The master told this worker to end."""


class PSCluster:
    """Connections to one generation's parameter servers, and which tensors each holds."""

    def __init__(self, ctx: NodeContext, info: dict[str, Any], sparse: set[str]) -> None:
        self.generation = info["generation"]
        self.clients = {ps: Client(ctx.zmq, addr, ctx.counters) for ps, addr in info["ps"].items()}
        placement = info["placement"]
        self.dense = {ps: sorted(n for n, p in placement.items() if p == ps and n not in sparse)
                      for ps in self.clients}  # fmt: skip
        self.tables = {ps: sorted(n for n, p in placement.items() if p == ps and n in sparse)
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
            tables = [t for t in self.tables[ps] if t in ids]
            requests[ps] = ({"op": "pull", "tables": tables}, [ids[t] for t in tables])
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
            header = {"op": "push", "key": list(key), "dense": self.dense[ps]}
            requests[ps] = ({**header, "tables": self.tables[ps]}, tensors)
        self.exchange(requests, on_stall)

    def fetch_rows(self, table: str, ids: torch.Tensor, on_stall) -> torch.Tensor:
        ps = self.owner[table]
        replies = self.exchange({ps: ({"op": "pull", "tables": [table]}, [ids])}, on_stall)
        header, tensors = replies[ps]
        return tensors[len(header["dense"])]

    def exchange(self, requests: dict, on_stall) -> dict:
        """Send every request, wait for every reply; ``on_stall()`` runs while waiting long.

        Raises:
            Reset: a server answered ``stale`` (its generation is not ours).
        """
        for ps, (header, tensors) in requests.items():
            self.clients[ps].send({**header, "gen": self.generation}, tensors)
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
            raise Reset("a parameter server is on another generation")
        return replies

    def close(self) -> None:
        for client in self.clients.values():
            client.close()


class Worker:
    """The loop of one PS-mode worker."""

    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx
        self.workload = ctx.workload()
        self.model = self.workload.make_model(seed=ctx.spec.training.seed)
        self.layout = layout_of(self.model)
        self.lookups = EmbeddingLookups(self.layout)
        self.cluster = PSCluster(ctx, ctx.config["cluster"], self.layout.sparse)
        self.paused = False

    def run(self) -> int:
        try:
            while True:
                reply = self.ask_for_task()
                lease = reply.get("lease")
                if lease is None:
                    time.sleep(LEASE_WAIT_S)
                    continue
                try:
                    self.train(Task.from_list(lease["task"]), lease["next_batch"], reply)
                except Reset:
                    continue
        except Stop:
            return 0
        finally:
            self.cluster.close()

    def ask_for_task(self) -> dict[str, Any]:
        """The master's reply to a lease request, its commands obeyed.

        Between tasks nothing is in flight, so a ``reset`` (the master rolled its
        parameter servers back to a checkpoint) has nothing to undo here; a task
        leased in the same reply comes from the rolled-back shard queues (the master
        queues resets after rebuilding them), so it is kept.
        """
        with suppress(Reset):
            if self.paused:
                self.hold()
        reply = self.ctx.call("lease")
        with suppress(Reset):
            self.follow(reply)
        return reply

    # -- training -----------------------------------------------------------------
    def train(self, task: Task, start: int, reply: dict) -> None:
        shard_indices = reply["tensors"][0]
        batch_size = self.ctx.spec.batch_size
        for batch in range(start, task.end):
            indices = shard_indices[batch * batch_size : (batch + 1) * batch_size]
            self.step((task.epoch, task.shard, batch), indices)
            op = "done" if batch + 1 == task.end else "progress"
            answer = self.ctx.call(op, task=task.to_list(), next_batch=batch + 1)
            self.follow(answer)
            if not answer.get("ok", False):
                raise Reset("the master no longer holds this lease for us")
            if self.paused:
                self.hold()

    def step(self, key: tuple[int, int, int], indices: torch.Tensor) -> None:
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

    # -- following the master -----------------------------------------------------------
    def follow(self, reply: dict[str, Any]) -> bool:
        """Obey the reply's commands in order, after switching to the cluster it names.

        Returns:
            True if the cluster changed.
        """
        cluster = reply.get("cluster")
        switched = bool(cluster) and cluster["generation"] != self.cluster.generation
        if switched:
            self.switch(cluster)
        reset = False
        for command in reply.get("commands", []):  # all of them: commands are sent once
            kind = command["cmd"]
            if kind == "pause":
                self.paused = True
            elif kind == "resume":
                self.paused = False
            elif kind == "reset":
                reset = True
            elif kind == "stop":
                raise Stop
        if reset:
            raise Reset("reset by the master")
        return switched

    def switch(self, info: dict[str, Any]) -> None:
        old, self.cluster = self.cluster, PSCluster(self.ctx, info, self.layout.sparse)
        self.ctx.generation = self.cluster.generation
        if old is not None:
            old.close()

    def hold(self) -> None:
        """Halted at a batch boundary until ``resume`` (or ``reset``/``stop``)."""
        while self.paused:
            self.follow(self.ctx.call("heartbeat", paused=True))
            if self.paused:
                time.sleep(HOLD_POLL_S)

    def check_master(self) -> None:
        """Called while a parameter server is slow to answer: a reset, a stop or a new
        cluster ends the wait (the request is retried, or deduplicated, later)."""
        if self.follow(self.ctx.call("heartbeat", paused=False)):
            raise Reset("the cluster changed during a request")


def run_worker(ctx: NodeContext) -> int:
    ctx.register()
    return Worker(ctx).run()
