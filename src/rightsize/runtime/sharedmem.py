"""Shared-memory segments for tensor payloads between a worker and a server on one host.

Over ZeroMQ every tensor byte crosses the kernel twice (into the socket, out of it):
one round trip of mlp3's 2 x 3.7 MB took 6.6 ms and 3.7 ms of the client's CPU here,
more than a whole plain mlp3 step (docs/runtime.md, "Transport"). Between processes
on one host the bytes need not move at all: a worker writes a push into a file in
``/dev/shm`` that both processes map, and only a descriptor travels on the socket
(:mod:`transport`; the rules of reuse are in :mod:`slots`).

- **Who owns what.** Only workers create segments (their request slots and the slots
  they lend a server for its replies); a server maps them by name
  (:class:`SharedMemory.attach`), keeps a bounded cache of mappings, and creates none.
  The pages are charged to the worker's cgroup, which touches them first
  (``runtime/memory_need.py`` counts them in the worker's floor).
- **Names.** ``rightsize.<pid>.<token>.<job>.<node>.<serial>``: per job and node, the
  creator's pid (so a sweep can tell a dead creator's segments), a random token per
  process (so a recycled pid never names the file a server still has mapped), and a
  serial never reused within the process.
- **Nothing leaks.** A connection unlinks its segments when it closes (a node's every
  normal way out, SIGTERM included); the master removes a node's segments when it reaps
  the process (SIGKILL, an OOM kill: :func:`segments.remove_segments`); a master sweeps, before a
  job starts, the segments of creators that are dead (:func:`segments.sweep_stale`: what a
  killed master's nodes left), as it sweeps stale cgroups.
- **Same host.** :func:`host_identity` is the hostname, the kernel's boot id and the
  device of the shared-memory directory, so two processes agree only if they can open
  the same files (two containers on one host with private ``/dev/shm`` differ).
"""

from __future__ import annotations

import itertools
import mmap
import os
import secrets
import socket
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

# names, and the cleanup after processes, need no torch (the Ray backend's actors use them)
from rightsize.runtime.segments import PREFIX, SEGMENT_NAME, SHM_DIR
from rightsize.runtime.slots import Layout

#: The kernel's boot id: one per boot of one machine.
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
#: Mappings a server keeps open at once (the least recently used goes first).
MAX_ATTACHED = 64
#: A server unmaps a segment it has not used for this long (its worker is gone or moved).
IDLE_DETACH_S = 10.0


class SegmentGone(Exception):
    """A descriptor names a segment that no longer exists (or was never valid)."""


def host_identity(directory: Path = SHM_DIR, boot_id: Path = BOOT_ID) -> str | None:
    """Who can share memory with whom: hostname, boot id and the shared-memory device;
    None where any of them is missing (shared memory is then not used)."""
    try:
        boot = boot_id.read_text().strip()
        device = os.stat(directory).st_dev
    except OSError:
        return None
    return f"{socket.gethostname()}/{boot}/{device}"


class Segment:
    """One shared-memory file, mapped: a flat byte array with typed views into it."""

    def __init__(self, path: Path, buffer: mmap.mmap) -> None:
        self.path, self.name = path, path.name
        self.bytes = np.frombuffer(buffer, np.uint8)  # keeps the mapping alive while viewed
        self.nbytes = len(self.bytes)
        self.unlinked = False

    @classmethod
    def create(cls, path: Path, nbytes: int) -> Segment:
        """A new file of ``nbytes``, its pages allocated now (charged to this process's cgroup)."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.posix_fallocate(fd, 0, nbytes)
            return cls(path, mmap.mmap(fd, nbytes, mmap.MAP_SHARED | mmap.MAP_POPULATE))
        except BaseException:
            os.unlink(path)
            raise
        finally:
            os.close(fd)

    @classmethod
    def attach(cls, path: Path) -> Segment:
        """Map an existing file (another process's).

        Raises:
            SegmentGone: it does not exist (unlinked by its owner, or another host's).
        """
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            raise SegmentGone(path.name) from None
        try:
            size = os.fstat(fd).st_size
            return cls(path, mmap.mmap(fd, size, mmap.MAP_SHARED | mmap.MAP_POPULATE))
        finally:
            os.close(fd)

    def write(self, layout: Layout, tensors: Sequence[torch.Tensor]) -> None:
        """Copy ``tensors`` to their places (the one copy a sender makes)."""
        for view, tensor in zip(self.tensors(layout), tensors, strict=True):
            view.copy_(tensor)

    def tensors(self, layout: Layout) -> list[torch.Tensor]:
        """Tensors viewing the segment in place (no copy).

        Raises:
            SegmentGone: the layout reaches past the segment's end.
        """
        if layout.nbytes > self.nbytes:
            raise SegmentGone(f"{self.name}: {layout.nbytes} bytes asked of {self.nbytes}")
        data = self.bytes
        return [torch.from_numpy(data[o : o + n].view(d).reshape(s)) for d, s, o, n in layout.entries]

    def unlink(self) -> None:
        """Remove the file; the pages live until every process has unmapped them."""
        if not self.unlinked:
            self.unlinked = True
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass


class SharedMemory:
    """One node's shared memory: the segments it creates and those of others it maps.

    Args:
        host: :func:`host_identity` of this process.
        directory: where segments live.
        owner: ``<job>.<node>`` in the names of the segments this process creates.
    """

    def __init__(self, host: str, directory: Path = SHM_DIR, owner: str = "node",
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        self.host, self.directory = host, directory
        self.prefix = f"{PREFIX}.{os.getpid()}.{secrets.token_hex(4)}.{owner}"
        self._serial = itertools.count()
        self._attached: OrderedDict[str, tuple[Segment, float]] = OrderedDict()
        self._clock = clock

    @classmethod
    def for_node(cls, job: str, node: str, directory: Path = SHM_DIR) -> SharedMemory | None:
        """The node's shared memory, or None if this host offers none (no writable directory,
        no boot id)."""
        host = host_identity(directory)
        if host is None or not os.access(directory, os.W_OK):
            return None
        return cls(host, directory, f"{job}.{node}")

    # -- the owner's side ---------------------------------------------------------------
    def create(self, nbytes: int) -> Segment:
        return Segment.create(self.directory / f"{self.prefix}.{next(self._serial)}", nbytes)

    # -- the peer's side ----------------------------------------------------------------
    def attach(self, name: str) -> Segment:
        """The segment ``name`` mapped (from the cache when it is there).

        Raises:
            SegmentGone: no such segment, or a name that is not a segment's.
        """
        cached = self._attached.pop(name, None)
        if cached is None:
            if not SEGMENT_NAME.fullmatch(name):
                raise SegmentGone(f"not a segment name: {name!r}")
            segment = Segment.attach(self.directory / name)
            while len(self._attached) >= MAX_ATTACHED:
                self._attached.popitem(last=False)
        else:
            segment = cached[0]
        self._attached[name] = (segment, self._clock())
        return segment

    def detach_idle(self) -> None:
        """Unmap segments unused for :data:`IDLE_DETACH_S` (a worker that is gone)."""
        limit = self._clock() - IDLE_DETACH_S
        for name in [n for n, (_, used) in self._attached.items() if used < limit]:
            del self._attached[name]

    def detach_all(self) -> None:
        """Unmap every segment of others (a new generation: old requests are never read)."""
        self._attached.clear()
