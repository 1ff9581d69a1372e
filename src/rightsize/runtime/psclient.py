"""A worker's connections to one generation's parameter servers: pulls and pushes in flight.

Every request goes to every server at once and is awaited later, so a worker can
have the next step's pull and this step's push out together (:mod:`worker`
decides their order, and with it what a pull sees). Each server serves its
socket's requests in the order they were sent; replies are matched to requests
by number, and a reply to a request given up (a reset, a new cluster) is dropped.

With shared memory (a server on this worker's host, :mod:`transport`) a pull lends
the server a slot sized for exactly what it will answer — its dense tensors and
the rows asked for — and the pulled values view that slot until the worker has
copied them into its model (:meth:`PSCluster.release`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import zmq

from rightsize.runtime.protocol import (
    ClusterView,
    Pull,
    Pulled,
    Push,
    Pushed,
    Refusal,
    Refused,
    data_reply,
)
from rightsize.runtime.shards import Key
from rightsize.runtime.sharedmem import SharedMemory
from rightsize.runtime.slots import slot_layout
from rightsize.runtime.transport import Client, Counters, Header

#: Seconds a worker waits on parameter servers before asking the master what is going on.
STALL_CHECK_S = 1.0

Replies = dict[str, tuple[Pulled | Pushed, list[torch.Tensor]]]


class ResetLease(Exception):
    """The master dropped this worker's lease (or the cluster changed under a request)."""


@dataclass(frozen=True)
class TensorMeta:
    """What a tensor of the model looks like, without its values (sizes a pull's reply)."""

    dtype: torch.dtype
    shape: tuple[int, ...]


@dataclass
class InFlight:
    """One request sent to several servers: its number at each, and what a pull asked for."""

    rids: dict[str, int]
    tables: dict[str, tuple[str, ...]] = field(default_factory=dict)
    ids: dict[str, torch.Tensor] = field(default_factory=dict)


class PSCluster:
    """Connections to one generation's parameter servers, and which tensors each holds."""

    def __init__(self, context: zmq.Context, counters: Counters, view: ClusterView,
                 params: dict[str, torch.Tensor], sparse: set[str],
                 shared: SharedMemory | None = None,
                 note: Callable[[str], None] = lambda _: None) -> None:  # fmt: skip
        self.generation = view.generation
        self.note, self.noted = note, False
        self.clients = {ps: Client(context, addr, counters, shared)
                        for ps, addr in view.servers.items()}  # fmt: skip
        placement = view.placement
        self.dense = {ps: tuple(sorted(n for n, p in placement.items() if p == ps and n not in sparse))
                      for ps in self.clients}  # fmt: skip
        self.tables = {ps: tuple(sorted(n for n, p in placement.items() if p == ps and n in sparse))
                       for ps in self.clients}  # fmt: skip
        self.owner = dict(placement)
        self.meta = {n: TensorMeta(p.dtype, tuple(p.shape)) for n, p in params.items()}
        self.poller = zmq.Poller()
        self.by_socket = {}
        for ps, client in self.clients.items():
            self.poller.register(client.socket, zmq.POLLIN)
            self.by_socket[client.socket] = ps
        self.arrived: dict[int, tuple[Header, list[torch.Tensor]]] = {}

    # -- requests ---------------------------------------------------------------------
    def send_pull(self, ids: dict[str, torch.Tensor]) -> InFlight:
        """Ask every server for its dense tensors and the rows ``ids`` names of its tables."""
        request = InFlight({}, ids=ids)
        for ps, client in self.clients.items():
            tables = tuple(t for t in self.tables[ps] if t in ids)
            request.tables[ps] = tables
            header = Pull(self.generation, tables).to_header()
            reply = self.reply_bytes(ps, {t: ids[t] for t in tables})
            request.rids[ps] = client.send(header, [ids[t] for t in tables], reply)
        return request

    def reply_bytes(self, ps: str, ids: dict[str, torch.Tensor]) -> int:
        """The bytes of server ``ps``'s answer to a pull of rows ``ids``: its dense tensors,
        then each table's rows, laid out as the server lays them (:func:`slots.slot_layout`)."""
        parts = [self.meta[n] for n in self.dense[ps]]
        for table, rows in ids.items():
            meta = self.meta[table]
            parts.append(TensorMeta(meta.dtype, (len(rows), *meta.shape[1:])))
        return slot_layout(parts).nbytes

    def send_push(self, key: Key, indices: torch.Tensor, dense: dict, sparse: dict) -> InFlight:
        """Send one batch's gradients, keyed ``key``, to every server."""
        rids = {}
        for ps, client in self.clients.items():
            tensors = [indices] + [dense[n] for n in self.dense[ps]]
            for name in self.tables[ps]:
                tensors += list(sparse[name])
            header = Push(self.generation, key, self.dense[ps], self.tables[ps]).to_header()
            rids[ps] = client.send(header, tensors)
        return InFlight(rids)

    def pulled(self, request: InFlight, on_stall: Callable[[], None]) -> tuple[dict, dict]:
        """The values a pull brought: dense tensors by name, and (ids, rows) per table."""
        dense, rows = {}, {}
        for ps, (reply, tensors) in self.wait(request, on_stall).items():
            count = len(reply.dense)
            dense.update(zip(reply.dense, tensors[:count], strict=True))
            rows.update((t, (request.ids[t], v))
                        for t, v in zip(request.tables[ps], tensors[count:], strict=True))  # fmt: skip
        return dense, rows

    def release(self, request: InFlight) -> None:
        """The values ``request`` pulled are copied out: the slots they were in are free."""
        for ps, rid in request.rids.items():
            self.clients[ps].done(rid)

    def fetch_rows(self, table: str, ids: torch.Tensor, on_stall) -> torch.Tensor:
        ps = self.owner[table]
        header = Pull(self.generation, (table,)).to_header()
        request = InFlight({ps: self.clients[ps].send(header, [ids], self.reply_bytes(ps, {table: ids}))})
        reply, tensors = self.wait(request, on_stall)[ps]
        rows = tensors[len(reply.dense)].clone()  # the slot is lent again at once
        self.release(request)
        return rows

    def wait(self, request: InFlight, on_stall: Callable[[], None]) -> Replies:
        """Every server's reply to ``request``; ``on_stall()`` runs while waiting long.

        Raises:
            ResetLease: a server answered ``stale`` (its generation is not ours), or ``lost``
                (it could not open the slot our request was in; sockets from now on).
        """
        while not all(rid in self.arrived for rid in request.rids.values()):
            events = dict(self.poller.poll(int(STALL_CHECK_S * 1000)))
            if not events:
                on_stall()
            for socket in events:
                reply = self.clients[self.by_socket[socket]].receive()
                if reply is not None:
                    self.arrived[reply[0]["rid"]] = reply
        replies = {}
        for ps, rid in request.rids.items():
            header, tensors = self.arrived.pop(rid)
            replies[ps] = (data_reply(header), tensors)
        if not self.noted:
            self._note_carriers()
        refusals = {reply.why for reply, _ in replies.values() if isinstance(reply, Refused)}
        if Refusal.STALE in refusals:
            raise ResetLease("a parameter server is on another generation")
        if Refusal.LOST in refusals:
            raise ResetLease("a parameter server could not open a shared-memory slot")
        return replies  # type: ignore[return-value]  # no refusal among them

    def forget(self, request: InFlight | None) -> None:
        """Give up on ``request``: its replies are dropped whenever they come."""
        if request is None:
            return
        for ps, rid in request.rids.items():
            self.clients[ps].forget(rid)
            self.arrived.pop(rid, None)

    def abandon(self) -> None:
        """Give up on every request in flight."""
        for client in self.clients.values():
            client.abandon()
        self.arrived.clear()

    def carriers(self) -> dict[str, str | None]:
        """What carries tensors to and from each server: ``shared memory``, ``sockets``, or
        None until the server has answered once."""
        return {ps: None if c.peer_shares is None else
                ("shared memory" if c.peer_shares else "sockets")
                for ps, c in self.clients.items()}  # fmt: skip

    def _note_carriers(self) -> None:
        """Say in the log, once every server has answered, what carries each one's tensors."""
        carriers = self.carriers()
        if None not in carriers.values():
            self.noted = True
            self.note(f"generation {self.generation}: tensors "
                      + ", ".join(f"{ps} by {how}" for ps, how in sorted(carriers.items())))  # fmt: skip

    def close(self) -> None:
        for client in self.clients.values():
            client.close()
