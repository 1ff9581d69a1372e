"""The slot protocol of the shared-memory data plane: where tensors lie in a slot, and when a
slot may be written again.

A *slot* is one shared-memory segment that a worker owns (:mod:`sharedmem` maps it).
The worker writes a request's tensors into a slot and sends the server a descriptor
(the slot's name and a :class:`Layout`) instead of the bytes; for a pull it also lends
the server a second slot to write its reply into. The rules, each of which keeps a
reader from ever seeing a half-written or overwritten buffer:

- the writer fills a slot completely before it sends the descriptor, so a writer
  killed mid-write (SIGKILL, OOM) never exposes a torn buffer: nothing names it yet;
- a slot holding a request is free again only when the server has answered that
  request (the server reads a push in place, before it answers);
- a slot lent for a reply is free again only when the worker has copied the reply out
  (:meth:`SlotPool.release` by the caller);
- a slot of a request given up (a reset, a halt) is never reused: the server may still
  read or write it, so it is unlinked (:meth:`SlotPool.discard`) and a fresh one is made
  when needed. Unlinking is safe while the peer has the segment mapped: its pages live
  until the last mapping goes.

How many slots a connection needs follows from the requests in flight on it: with
``runtime.overlap`` a worker has the next batch's pull and up to two pushes out per
server (:mod:`worker`), so :data:`MAX_SLOTS` slots cover a pull's request and reply
slots and two pushes with room to spare; a request that finds none free goes over the
socket instead. Pure bookkeeping: the segments are made by a factory passed in.

A reply's tensors may be :class:`Fill` s, produced straight into their place (a lent
slot, or a new tensor for the socket); :func:`slot_layout` lays out tensors and fills
alike, so a worker sizes the slot it lends exactly as the server will fill it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import numpy as np
import torch

#: Every tensor in a slot starts at a multiple of this many bytes (a cache line; more than
#: any dtype needs, so a view at its offset is aligned).
ALIGN_BYTES = 64
#: Slot sizes are whole pages (the unit shared memory is allocated in).
PAGE_BYTES = 4096
#: A new slot holds this many times the payload that made it, so a payload that varies
#: (a batch's embedding rows) rarely outgrows its slot.
SLOT_GROWTH = 1.25
#: Most slots one connection keeps (requests in flight on it, with their reply slots).
MAX_SLOTS = 8

#: What a slot is held for: (request number, "out" for its tensors or "in" for its reply).
Token = Hashable
OUT, IN = "out", "in"


class Entry(NamedTuple):
    """One tensor's place in a slot: its dtype (numpy's ``dtype.str``), shape, byte offset
    and size. A plain tuple: a push of a click model has 100+ tensors, each laid out twice a
    step (a dataclass cost 2.3 us an entry)."""

    dtype: str
    shape: tuple[int, ...]
    offset: int
    nbytes: int


@dataclass(frozen=True)
class Layout:
    """Where each tensor of one message lies in a slot, and the bytes the slot must hold."""

    entries: tuple[Entry, ...]
    nbytes: int

    def to_json(self) -> list:
        return [[e.dtype, e.shape, e.offset] for e in self.entries]

    @classmethod
    def from_json(cls, data: list) -> Layout:
        entries = tuple(Entry(d, tuple(s), o, math.prod(s) * itemsize(d)) for d, s, o in data)
        return cls(entries, max((e.offset + e.nbytes for e in entries), default=0))


def plan_layout(specs: Sequence[tuple[str, Sequence[int]]]) -> Layout:
    """Tensors ``(numpy dtype string, shape)`` one after another, each aligned."""
    entries, offset = [], 0
    for dtype, shape in specs:
        nbytes = math.prod(shape) * itemsize(dtype)
        entries.append(Entry(dtype, tuple(shape), offset, nbytes))
        offset += -(-nbytes // ALIGN_BYTES) * ALIGN_BYTES
    return Layout(tuple(entries), offset)


@functools.cache
def itemsize(dtype: str) -> int:
    return np.dtype(dtype).itemsize


@dataclass(frozen=True)
class Fill:
    """A tensor a reply produces straight into its place: a slot lent in shared memory, or a
    new tensor for the socket (a server's pull reply, copied once from its parameters)."""

    dtype: torch.dtype
    shape: tuple[int, ...]
    fill: Callable[[torch.Tensor], Any]

    def materialize(self) -> torch.Tensor:
        out = torch.empty(self.shape, dtype=self.dtype)
        self.fill(out)
        return out


Part = torch.Tensor | Fill


def payload_bytes(parts: Sequence[Part]) -> int:
    return sum(math.prod(p.shape) * p.dtype.itemsize for p in parts)


def slot_layout(parts: Sequence[Part]) -> Layout:
    """Where ``parts`` lie in a slot (the same layout a worker sizes a lent slot with)."""
    return plan_layout([(numpy_dtype(p.dtype), p.shape) for p in parts])


@functools.cache
def numpy_dtype(dtype: torch.dtype) -> str:
    return torch.empty(0, dtype=dtype).numpy().dtype.str


def aligned(nbytes: int, to: int = ALIGN_BYTES) -> int:
    return -(-nbytes // to) * to


def slot_bytes(payload_bytes: int) -> int:
    """The size of a new slot for ``payload_bytes``: grown by :data:`SLOT_GROWTH`, whole pages."""
    return max(PAGE_BYTES, aligned(math.ceil(payload_bytes * SLOT_GROWTH), PAGE_BYTES))


class Slot(Protocol):
    name: str
    nbytes: int

    def unlink(self) -> None: ...


class SlotPool:
    """The slots of one connection: free ones, and busy ones by what holds them.

    Args:
        make: creates a slot of at least the given bytes.
        max_slots: the most slots kept at once (free and busy together).
    """

    def __init__(self, make: Callable[[int], Slot], max_slots: int = MAX_SLOTS) -> None:
        self.make, self.max_slots = make, max_slots
        self.free: list[Slot] = []
        self.busy: dict[Token, Slot] = {}

    def acquire(self, nbytes: int, token: Token) -> Slot | None:
        """A slot of at least ``nbytes`` for ``token``: the smallest free one that fits, else
        a new one (replacing a free one too small); None if every slot is busy."""
        fits = [s for s in self.free if s.nbytes >= nbytes]
        if fits:
            slot = min(fits, key=lambda s: s.nbytes)
            self.free.remove(slot)
        elif self.free or len(self.busy) < self.max_slots:
            if self.free:  # too small for this payload: a larger slot takes its place
                self.free.remove(small := max(self.free, key=lambda s: s.nbytes))
                small.unlink()
            slot = self.make(slot_bytes(nbytes))
        else:
            return None
        self.busy[token] = slot
        return slot

    def held(self, token: Token) -> Slot | None:
        return self.busy.get(token)

    def release(self, token: Token) -> None:
        """The peer can no longer touch ``token``'s slot: it may be written again."""
        slot = self.busy.pop(token, None)
        if slot is not None:
            self.free.append(slot)

    def discard(self, token: Token) -> None:
        """``token``'s request was given up while the peer may still touch its slot: the slot
        is unlinked and never reused."""
        slot = self.busy.pop(token, None)
        if slot is not None:
            slot.unlink()

    def discard_busy(self) -> None:
        """Every request given up (a reset): every busy slot is discarded."""
        for token in list(self.busy):
            self.discard(token)

    def close(self) -> None:
        """Unlink every slot (the connection is closed)."""
        self.discard_busy()
        for slot in self.free:
            slot.unlink()
        self.free.clear()
