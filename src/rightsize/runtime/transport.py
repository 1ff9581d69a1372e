"""Messages between nodes over ZeroMQ: a JSON header plus raw tensor frames, counted in bytes.

Why ZeroMQ: it is a proven message transport (pyzmq is a dependency already),
multipart messages carry a tensor's bytes as their own frame with no
serialisation step (sent zero-copy above :data:`ZERO_COPY_BYTES`), a ROUTER
socket lets one parameter server serve any number of workers from one loop,
and DEALER sockets reconnect by themselves. ``benchmarks/run/runtime_transport.py``
measures it against torch.distributed's point-to-point ``send``/``recv`` for
the model's tensor sizes (docs/benchmarks.md).

Every connection counts the bytes it sends and receives (header included):
that is the node's network in/out that the master reports to policies.

Between a worker and a server on the same host (``runtime.shared_memory: auto``)
tensor payloads skip the socket: the worker writes a request's tensors into a
shared-memory slot it owns and lends the server a slot for a pull's reply; only
the header, with a descriptor (``_s``: slot name and layout; ``_r``: the slot
lent), goes over ZeroMQ (:mod:`sharedmem`, :mod:`slots`). The peers find out they
share a host on their first exchange: a worker's requests carry its
:func:`sharedmem.host_identity` until a reply tells it the server's. A server
that cannot open a slot answers ``lost`` and the worker goes back to sockets.
Bytes in shared memory are counted as bytes in and out all the same: they are
what the nodes exchange, whatever carries them.
"""

from __future__ import annotations

import itertools
import json
import math
import time
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import zmq

from rightsize.runtime import curve
from rightsize.runtime.sharedmem import SegmentGone, SharedMemory
from rightsize.runtime.slots import (
    IN,
    OUT,
    Fill,
    Layout,
    Part,
    SlotPool,
    payload_bytes,
    slot_layout,
)

#: Frames at least this large are sent without copying (ZeroMQ's guidance:
#: copying small messages is cheaper than tracking their buffers).
ZERO_COPY_BYTES = 64 * 1024


Header = dict[str, Any]


def encode(header: Header, tensors: Sequence[torch.Tensor] = ()) -> list:
    """Frames for ``header`` and ``tensors``; tensors must not be modified until sent.

    A tensor of :data:`ZERO_COPY_BYTES` or more is its own frame; smaller ones are
    packed into one frame after the header (a push of 52 embedding gradients is
    then 3 frames, not 105: each frame costs a system call and a message part).
    """
    arrays = [t.detach().contiguous().cpu().numpy() for t in tensors]
    meta, small, large = [], [], []
    for a in arrays:
        big = a.nbytes >= ZERO_COPY_BYTES
        meta.append([a.dtype.str, list(a.shape), int(big)])
        (large if big else small).append(a)
    packed = b"".join(a.tobytes() for a in small)
    return [json.dumps({**header, "_t": meta}).encode(), packed, *large]


def decode(frames: Sequence[Any]) -> tuple[Header, list[torch.Tensor]]:
    """Inverse of :func:`encode` (tensors are views of the received buffers)."""
    return decode_frames(json.loads(_bytes(frames[0])), frames)


def decode_frames(header: Header, frames: Sequence[Any]) -> tuple[Header, list[torch.Tensor]]:
    with warnings.catch_warnings():
        # we never write into a received buffer (values are copied into parameters),
        # so torch's warning about read-only memory does not apply
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return header, _tensors(header.pop("_t"), _buffer(frames[1]), iter(frames[2:]))


def _tensors(meta: list, packed: Any, large: Any) -> list[torch.Tensor]:
    tensors, offset = [], 0
    for dtype, shape, big in meta:
        dt = np.dtype(dtype)
        count = math.prod(shape)  # not np.prod: 100+ tensors a push, 4 us each
        if big:
            array = np.frombuffer(_buffer(next(large)), dtype=dt, count=count)
        else:
            array = np.frombuffer(packed, dtype=dt, count=count, offset=offset)
            offset += count * dt.itemsize
        tensors.append(torch.from_numpy(array).view(shape))
    return tensors


def _buffer(frame: Any) -> Any:
    return frame.buffer if isinstance(frame, zmq.Frame) else frame


def _bytes(frame: Any) -> bytes:
    return frame.bytes if isinstance(frame, zmq.Frame) else bytes(frame)


def _size(frame: Any) -> int:
    if isinstance(frame, np.ndarray):
        return frame.nbytes
    return len(frame.buffer) if isinstance(frame, zmq.Frame) else len(frame)


class Counters:
    """Bytes in and out of one node, over all its sockets."""

    def __init__(self) -> None:
        self.bytes_in = 0
        self.bytes_out = 0

    def sent(self, frames: Sequence[Any]) -> None:
        self.bytes_out += sum(_size(f) for f in frames)

    def received(self, frames: Sequence[Any]) -> None:
        self.bytes_in += sum(_size(f) for f in frames)


def send(socket: zmq.Socket, frames: list, counters: Counters) -> None:
    """Send a message: small frames copied, large ones zero-copy (ZeroMQ's guidance)."""
    counters.sent(frames)
    last = len(frames) - 1
    for i, frame in enumerate(frames):
        flags = zmq.SNDMORE if i < last else 0
        socket.send(frame, flags, copy=_size(frame) < ZERO_COPY_BYTES)


def route(request: Header) -> Header:
    """What a reply to ``request`` needs to find its way back: the slot the request lent,
    and whether it asked for this host's identity (add it to the reply's header)."""
    back = {}
    if "_r" in request:
        back["_r"] = request["_r"]
    if "host" in request:
        back["_host"] = True
    return back


class Server:
    """A ROUTER socket: requests from many peers, each answered by its identity.

    With ``shared`` (a parameter server on a host with shared memory) it reads requests'
    tensors from their slots in place and writes replies into the slots they lend.
    """

    def __init__(self, context: zmq.Context, counters: Counters, host: str = "127.0.0.1",
                 shared: SharedMemory | None = None) -> None:  # fmt: skip
        self.socket = context.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        curve.serve(context, self.socket)
        port = self.socket.bind_to_random_port(f"tcp://{host}")
        self.address = f"tcp://{host}:{port}"
        self.counters = counters
        self.shared = shared

    def receive(self) -> tuple[bytes, Header, list[torch.Tensor] | None]:
        """The next request: its sender, header and tensors (None: they were in a slot that
        cannot be opened, see :mod:`sharedmem`)."""
        frames = self.socket.recv_multipart(copy=False)
        self.counters.received(frames[1:])
        header = json.loads(_bytes(frames[1]))
        if "_s" not in header:
            return frames[0].bytes, *decode_frames(header, frames[1:])
        name, layout = header.pop("_s")
        header.pop("_t")
        try:
            if self.shared is None:
                raise SegmentGone(name)
            tensors = self.shared.attach(name).tensors(Layout.from_json(layout))
        except SegmentGone:
            return frames[0].bytes, header, None
        self.counters.bytes_in += payload_bytes(tensors)
        return frames[0].bytes, header, tensors

    def reply(self, identity: bytes, header: Header, tensors: Sequence[Part] = ()) -> None:
        """Answer ``identity``; a header with a request's :func:`route` goes into the slot
        the request lent (if the tensors fit) and tells this host's identity if asked."""
        lent, asked = header.get("_r"), header.get("_host")
        if lent is not None or asked is not None:
            header = {k: v for k, v in header.items() if k not in ("_r", "_host")}
            if self.shared is not None:
                if asked:
                    header["host"] = self.shared.host
                if tensors and lent and self._place(header, tensors, *lent):
                    tensors = ()
        frames = encode(header, [p.materialize() if isinstance(p, Fill) else p for p in tensors])
        send(self.socket, [identity, *frames], self.counters)
        self.counters.bytes_out -= len(identity)  # routing, not payload

    def _place(self, header: Header, parts: Sequence[Part], name: str, lent_bytes: int) -> bool:
        """Write ``parts`` into the lent slot ``name``; False if they do not fit or it is gone."""
        layout = slot_layout(parts)
        try:
            segment = self.shared.attach(name)
        except SegmentGone:
            return False
        if layout.nbytes > min(lent_bytes, segment.nbytes):
            return False
        for out, part in zip(segment.tensors(layout), parts, strict=True):
            part.fill(out) if isinstance(part, Fill) else out.copy_(part)
        header["_s"] = [name, layout.to_json()]
        self.counters.bytes_out += payload_bytes(parts)
        return True

    def close(self) -> None:
        self.socket.close(linger=0)


class Client:
    """A DEALER socket to one server, with numbered requests so late replies are dropped.

    Several requests may be outstanding (a worker sends the next step's pull while its
    last push is applied); a reply is matched to its request by number, and a reply to a
    request no longer awaited (given up after a reset) is dropped.

    With ``shared`` (a worker on a host with shared memory) requests to a server that
    turns out to share the host carry their tensors in slots of this connection's
    :class:`slots.SlotPool`, and a request that expects ``reply_bytes`` of tensors lends
    a slot for them; a reply's tensors then view that slot until :meth:`done`.
    """

    _ids = itertools.count(1)

    def __init__(self, context: zmq.Context, address: str, counters: Counters,
                 shared: SharedMemory | None = None) -> None:  # fmt: skip
        self.address = address
        self.socket = context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        curve.dial(context, self.socket)
        self.socket.connect(address)
        self.counters = counters
        self.pending: set[int] = set()
        self.shared = shared
        self.pool = SlotPool(shared.create) if shared is not None else None
        #: whether the server shares this host; None until its first reply says
        self.peer_shares: bool | None = None if shared is not None else False

    def send(self, header: Header, tensors: Sequence[torch.Tensor] = (),
             reply_bytes: int = 0) -> int:  # fmt: skip
        """Send a request; returns its number (the ``rid`` its reply carries)."""
        rid = next(self._ids)
        self.pending.add(rid)
        header = {**header, "rid": rid}
        shared_bytes = 0
        if self.peer_shares is None:
            header["host"] = self.shared.host
        elif self.peer_shares:
            try:
                tensors, shared_bytes = self._lend(rid, header, tensors, reply_bytes)
            except OSError:  # no room for a new slot (/dev/shm full): sockets from now on
                self.peer_shares = False
                self.pool.release((rid, OUT))
                header.pop("_s", None), header.pop("_r", None)
        send(self.socket, encode(header, tensors), self.counters)
        self.counters.bytes_out += shared_bytes  # what a socket would have carried
        return rid

    def _lend(self, rid: int, header: Header, tensors: Sequence[torch.Tensor],
              reply_bytes: int) -> tuple[Sequence[torch.Tensor], int]:  # fmt: skip
        """Put ``tensors`` in a slot (written whole before the descriptor goes out) and lend
        one for the reply; returns the tensors left for the socket (none, or all if no
        slot was free) and the bytes put in the slot."""
        shared_bytes = 0
        if tensors:
            layout = slot_layout(tensors)
            slot = self.pool.acquire(layout.nbytes, (rid, OUT))
            if slot is not None:
                slot.write(layout, tensors)
                header["_s"] = [slot.name, layout.to_json()]
                shared_bytes, tensors = payload_bytes(tensors), ()
        if reply_bytes:
            lent = self.pool.acquire(reply_bytes, (rid, IN))
            if lent is not None:
                header["_r"] = [lent.name, lent.nbytes]
        return tensors, shared_bytes

    def forget(self, rid: int) -> None:
        """Stop awaiting request ``rid``: its reply, if it comes, is dropped, and its slots
        are never reused (the server may still be reading or writing them)."""
        self.pending.discard(rid)
        if self.pool is not None:
            self.pool.discard((rid, OUT))
            self.pool.discard((rid, IN))

    def abandon(self) -> None:
        """Stop awaiting every request (a reset): each is forgotten."""
        self.pending.clear()
        if self.pool is not None:
            self.pool.discard_busy()

    def done(self, rid: int) -> None:
        """The reply to ``rid`` has been copied out: the slot it was written into is free."""
        if self.pool is not None:
            self.pool.release((rid, IN))

    def ready(self, timeout_s: float) -> bool:
        return bool(self.socket.poll(int(timeout_s * 1000)))

    def receive(self) -> tuple[Header, list[torch.Tensor]] | None:
        """The next reply to an awaited request (its ``rid`` in the header), or None if what
        arrived answered a request no longer awaited."""
        frames = self.socket.recv_multipart(copy=False)
        self.counters.received(frames)
        header = json.loads(_bytes(frames[0]))
        rid = header.get("rid")
        if self.pool is not None:
            self.pool.release((rid, OUT))  # answered: the server no longer reads it
        if rid not in self.pending:
            return None
        self.pending.discard(rid)
        if self.peer_shares is None:
            self.peer_shares = header.get("host") == self.shared.host
        if header.get("lost"):  # the server could not open our slot: sockets from now on
            self.peer_shares = False
        if "_s" not in header:
            return decode_frames(header, frames)
        name, layout = header.pop("_s")
        header.pop("_t")
        slot = self.pool.held((rid, IN))
        if slot is None or slot.name != name:
            raise RuntimeError(f"{self.address} answered {rid} in a slot not lent: {name}")
        tensors = slot.tensors(Layout.from_json(layout))
        self.counters.bytes_in += payload_bytes(tensors)
        return header, tensors

    def call(
        self, header: Header, tensors: Sequence[torch.Tensor] = (), timeout_s: float = 60.0
    ) -> tuple[Header, list[torch.Tensor]]:
        """Send and wait for the reply (a client that calls has no other request pending).

        Raises:
            TimeoutError: no reply within ``timeout_s``.
        """
        rid = self.send(header, tensors)
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            if self.ready(left):
                reply = self.receive()
                if reply is not None and reply[0]["rid"] == rid:
                    return reply
        self.forget(rid)
        raise TimeoutError(f"no reply from {self.address} within {timeout_s:g}s")

    def close(self) -> None:
        self.socket.close(linger=0)
        if self.pool is not None:
            self.pool.close()


class Pacer:
    """Caps a sender at ``bytes_per_s`` (a token bucket of one message): an emulated link.

    Used for the optional per-PS bandwidth cap, so a PS network bottleneck
    (NEARCHUS's PSN-bottleneck) can be produced on one machine.
    """

    def __init__(self, bytes_per_s: float | None, clock=time.monotonic, sleep=time.sleep) -> None:
        self.bytes_per_s = bytes_per_s
        self._free_at = 0.0
        self._clock, self._sleep = clock, sleep

    def wait(self, nbytes: int) -> None:
        if not self.bytes_per_s:
            return
        now = self._clock()
        self._free_at = max(now, self._free_at) + nbytes / self.bytes_per_s
        self._sleep(self._free_at - now)
