"""The parameter-server process: serve pulls and pushes, checkpoint, export and load on command.

One loop polls the server socket; between requests it heartbeats the master
(:data:`HEARTBEAT_S`) and carries out its commands:

- ``checkpoint`` (version, path): copy the state at once, write it on a
  background thread (workers keep training), acknowledge when it is on disk;
- ``export`` (path): write the state now (workers are halted for a
  repartition, DLRover §5.3) and acknowledge;
- ``load`` (generation, names, paths): rebuild the store from saved states —
  a checkpoint after a failure, or the exports of a repartition — and from
  then on serve only requests of that generation;
- ``stop``.

A request carries the cluster generation its sender believes in; one from
another generation is answered ``stale`` and not applied, so a gradient
computed before a restore or a repartition can never touch the parameters
after it.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections import deque
from typing import Any

import numpy as np
import torch
import zmq

from rightsize.core.spec import SharedMemoryMode
from rightsize.runtime import checkpoint
from rightsize.runtime.backends.contract import node_bind_host
from rightsize.runtime.model_io import layout_of
from rightsize.runtime.node_link import NodeContext
from rightsize.runtime.paramstore import OptimSettings, ParamStore, warm_up
from rightsize.runtime.protocol import (
    Ack,
    AckKind,
    Checkpoint,
    Command,
    Export,
    Heartbeat,
    Load,
    Pull,
    Pulled,
    Push,
    Pushed,
    Refusal,
    Refused,
    Stop,
    data_request,
)
from rightsize.runtime.sharedmem import SharedMemory, host_identity
from rightsize.runtime.slots import Fill
from rightsize.runtime.transport import Server, route

#: Seconds between heartbeats to the master (its commands arrive in the replies).
HEARTBEAT_S = 0.1


class Link:
    """The server's emulated outgoing link of ``bytes_per_s`` (``runtime.ps_bandwidth``).

    Replies leave in order, each once the link has carried it and every reply before
    it, as on a network link; the server goes on serving meanwhile, as a CPU goes on
    working while its NIC sends. (A pacer that slept before each send held the server
    for the transmission, so its CPU work and its link took turns and a link-bound
    server read its link at ``transmission / (transmission + its CPU work)``: 0.87-0.92
    of it for examples/mlp-link-bound.yaml, against 0.96 now, so NEARCHUS's PSN check —
    more than 10% of samples above 90% — fired there by one sample in seven; with
    1024-wide layers at 40 MiB/s it read 0.88 on average.) Without a cap, a reply is sent
    at once.
    """

    def __init__(self, server: Server, bytes_per_s: float | None, clock=time.monotonic) -> None:
        self.server, self.bytes_per_s, self.clock = server, bytes_per_s, clock
        self.free_at = 0.0
        self.queue: deque[tuple[float, Any, dict, list[torch.Tensor]]] = deque()

    def send(self, identity: Any, header: dict, tensors: list[torch.Tensor]) -> None:
        """Queue a reply behind the ones on the link (``tensors`` are not modified after)."""
        if not self.bytes_per_s:
            self.server.reply(identity, header, tensors)
            return
        nbytes = sum(t.numel() * t.element_size() for t in tensors)
        self.free_at = max(self.clock(), self.free_at) + nbytes / self.bytes_per_s
        self.queue.append((self.free_at, identity, header, tensors))
        self.flush()

    def flush(self, everything: bool = False) -> None:
        """Send the replies the link has carried by now (``everything``: all of them)."""
        now = self.clock()
        while self.queue and (everything or self.queue[0][0] <= now):
            _, identity, header, tensors = self.queue.popleft()
            self.server.reply(identity, header, tensors)

    def wait_s(self, longest_s: float) -> float:
        """How long the server may wait for a request before the next reply is due."""
        if not self.queue:
            return longest_s
        return min(longest_s, max(0.0, self.queue[0][0] - self.clock()))


def optim_settings(ctx: NodeContext) -> OptimSettings:
    training = ctx.spec.training
    return OptimSettings(training.optimizer, training.lr, training.momentum)


def fresh_store(ctx: NodeContext, names: tuple[str, ...]) -> ParamStore:
    """This server's share of a newly initialised model (seeded, so every node agrees).

    A server launched to join a repartition holds nothing until it loads.
    """
    if not names:
        return ParamStore({}, (), optim_settings(ctx))
    model = ctx.workload().make_model(seed=ctx.spec.training.seed)
    layout = layout_of(model)
    tensors = {n: layout.params[n].detach() for n in names}
    return ParamStore(tensors, layout.sparse, optim_settings(ctx))


def load_store(ctx: NodeContext, names: tuple[str, ...], paths: tuple[str, ...]) -> ParamStore:
    """This server's tensors from saved states, or freshly initialised if there are none
    (a restore before the first checkpoint restarts from the seed)."""
    if not paths:
        return fresh_store(ctx, names)
    states = [checkpoint.load(p) for p in paths]
    return ParamStore.from_states(states, names, optim_settings(ctx))


class ParameterServer:
    """The serving loop around one :class:`ParamStore`."""

    def __init__(self, ctx: NodeContext, server: Server, link: Link) -> None:
        self.ctx, self.server, self.link = ctx, server, link
        config = ctx.config.ps
        warm_up(optim_settings(ctx))
        self.store = load_store(ctx, config.names, config.paths)
        self.generation = ctx.generation = config.generation  # serving from now on
        self.acks: queue.SimpleQueue[Ack] = queue.SimpleQueue()
        self.writers: list[threading.Thread] = []
        self.running = True

    def run(self) -> int:
        self.acks.put(Ack(AckKind.READY, generation=self.generation))
        next_beat = 0.0
        while self.running:
            wait_s = self.link.wait_s(max(0.0, next_beat - time.monotonic()))
            if self.server.socket.poll(math.ceil(wait_s * 1000), zmq.POLLIN):
                self.serve_one()
            self.link.flush()
            if time.monotonic() >= next_beat:
                self.heartbeat()
                next_beat = time.monotonic() + HEARTBEAT_S
        self.link.flush(everything=True)
        for writer in self.writers:
            writer.join()
        return 0

    # -- data plane -----------------------------------------------------------------
    def serve_one(self) -> None:
        identity, header, tensors = self.server.receive()
        request = data_request(header)
        back = {"rid": header["rid"], **route(header)}
        if request.generation != self.generation:
            self.link.send(identity, {**back, **Refused(Refusal.STALE).to_header()}, [])
            return
        if tensors is None:  # in a slot this server cannot open: nothing is applied
            self.link.send(identity, {**back, **Refused(Refusal.LOST).to_header()}, [])
            return
        if isinstance(request, Pull):
            reply, out = self._pull(request, tensors)
        else:
            reply, out = self._push(request, tensors)
        self.link.send(identity, {**reply.to_header(), **back}, out)

    def _pull(self, request: Pull, tensors: list[torch.Tensor]) -> tuple[Pulled, list]:
        """Dense values and the rows asked for, each copied once: into the slot the worker
        lent (shared memory) or into a new tensor for the socket. Under an emulated link the
        reply waits its turn, so it is copied now (the values of now)."""
        store = self.store
        out = [value_fill(value) for value in store.dense_values()]
        for name, ids in zip(request.tables, tensors, strict=True):
            out.append(rows_fill(store.params[name].detach(), ids))
        if self.link.bytes_per_s:
            out = [part.materialize() for part in out]
        return Pulled(tuple(store.dense_names)), out

    def _push(self, request: Push, tensors: list[torch.Tensor]) -> tuple[Pushed, list]:
        it = iter(tensors)
        indices = next(it).numpy().astype(np.int32)
        dense = {name: next(it) for name in request.dense}
        sparse = {name: (next(it), next(it)) for name in request.tables}
        applied = self.store.apply(request.key, indices, dense, sparse)
        if applied:
            self.ctx.counted_at = time.monotonic()
        self.ctx.updates = self.store.updates
        return Pushed(applied), []

    # -- control plane --------------------------------------------------------------
    def heartbeat(self) -> None:
        acks = []
        while not self.acks.empty():
            acks.append(self.acks.get())
        reply, _ = self.ctx.call(Heartbeat(tuple(acks)))
        for command in reply.commands:
            self.handle(command)
        if self.server.shared is not None:
            self.server.shared.detach_idle()

    def handle(self, command: Command) -> None:
        if isinstance(command, Checkpoint):
            self._checkpoint(command.version, command.path)
        elif isinstance(command, Export):
            checkpoint.save_atomic(self.store.state_dict(), command.path)
            self.acks.put(Ack(AckKind.EXPORTED, generation=command.generation))
        elif isinstance(command, Load):
            if self.server.shared is not None:  # requests of the old generation are not read
                self.server.shared.detach_all()
            self.store = load_store(self.ctx, command.names, command.paths)
            self.generation = self.ctx.generation = command.generation
            self.acks.put(Ack(AckKind.LOADED, generation=self.generation))
        elif isinstance(command, Stop):
            self.running = False

    def _checkpoint(self, version: int, path: str) -> None:
        state = self.store.state_dict()  # a copy: training goes on while it is written

        def write() -> None:
            checkpoint.save_atomic(state, path)
            self.acks.put(Ack(AckKind.CHECKPOINTED, version=version))

        writer = threading.Thread(target=write, name=f"checkpoint-v{version}", daemon=True)
        writer.start()
        self.writers = [w for w in self.writers if w.is_alive()] + [writer]


def value_fill(value: torch.Tensor) -> Fill:
    """``value`` copied into the reply (a copy, as the parameter changes with the next push)."""
    return Fill(value.dtype, tuple(value.shape), lambda out: out.copy_(value))


def rows_fill(table: torch.Tensor, ids: torch.Tensor) -> Fill:
    """Rows ``ids`` of ``table`` gathered straight into the reply."""
    return Fill(table.dtype, (len(ids), *table.shape[1:]),
                lambda out: torch.index_select(table, 0, ids, out=out))  # fmt: skip


def run_ps(ctx: NodeContext) -> int:
    # the optimizers build sparse tensors from ids we coalesced ourselves: skip the checks
    torch.sparse.check_sparse_tensor_invariants.disable()
    server = Server(ctx.zmq, ctx.counters, host=node_bind_host())
    ctx.register(address=server.address)
    host = host_identity() if ctx.spec.runtime.shared_memory == SharedMemoryMode.AUTO else None
    server.shared = SharedMemory(host) if host else None  # the job file is known from now
    link = Link(server, ctx.spec.runtime.ps_bandwidth)
    return ParameterServer(ctx, server, link).run()
