"""Messages between nodes over ZeroMQ: a JSON header plus raw tensor frames, counted in bytes.

Why ZeroMQ: it is a proven message transport (pyzmq is a dependency already),
multipart messages carry a tensor's bytes as their own frame with no
serialisation step (sent zero-copy above :data:`ZERO_COPY_BYTES`), a ROUTER
socket lets one parameter server serve any number of workers from one loop,
and DEALER sockets reconnect by themselves. ``benchmarks/runtime_transport.py``
measures it against torch.distributed's point-to-point ``send``/``recv`` for
the model's tensor sizes (docs/benchmarks.md).

Every connection counts the bytes it sends and receives (header included):
that is the node's network in/out that the master reports to policies.
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
    header = json.loads(_bytes(frames[0]))
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


class Server:
    """A ROUTER socket: requests from many peers, each answered by its identity."""

    def __init__(self, context: zmq.Context, counters: Counters, host: str = "127.0.0.1") -> None:
        self.socket = context.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        port = self.socket.bind_to_random_port(f"tcp://{host}")
        self.address = f"tcp://{host}:{port}"
        self.counters = counters

    def receive(self) -> tuple[bytes, Header, list[torch.Tensor]]:
        frames = self.socket.recv_multipart(copy=False)
        self.counters.received(frames[1:])
        header, tensors = decode(frames[1:])
        return frames[0].bytes, header, tensors

    def reply(self, identity: bytes, header: Header, tensors: Sequence[torch.Tensor] = ()) -> None:
        send(self.socket, [identity, *encode(header, tensors)], self.counters)
        self.counters.bytes_out -= len(identity)  # routing, not payload

    def close(self) -> None:
        self.socket.close(linger=0)


class Client:
    """A DEALER socket to one server, with numbered requests so late replies are dropped.

    Several requests may be outstanding (a worker sends the next step's pull while its
    last push is applied); a reply is matched to its request by number, and a reply to a
    request no longer awaited (given up after a reset) is dropped.
    """

    _ids = itertools.count(1)

    def __init__(self, context: zmq.Context, address: str, counters: Counters) -> None:
        self.address = address
        self.socket = context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.connect(address)
        self.counters = counters
        self.pending: set[int] = set()

    def send(self, header: Header, tensors: Sequence[torch.Tensor] = ()) -> int:
        """Send a request; returns its number (the ``rid`` its reply carries)."""
        rid = next(self._ids)
        self.pending.add(rid)
        send(self.socket, encode({**header, "rid": rid}, tensors), self.counters)
        return rid

    def forget(self, rid: int) -> None:
        """Stop awaiting request ``rid``: its reply, if it comes, is dropped."""
        self.pending.discard(rid)

    def ready(self, timeout_s: float) -> bool:
        return bool(self.socket.poll(int(timeout_s * 1000)))

    def receive(self) -> tuple[Header, list[torch.Tensor]] | None:
        """The next reply to an awaited request (its ``rid`` in the header), or None if what
        arrived answered a request no longer awaited."""
        frames = self.socket.recv_multipart(copy=False)
        self.counters.received(frames)
        header, tensors = decode(frames)
        if header.get("rid") not in self.pending:
            return None
        self.pending.discard(header["rid"])
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
