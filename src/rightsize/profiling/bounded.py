"""Running one measurement in a forked child whose memory the kernel bounds.

``rightsize profile --memory-limit 8Gi`` was measured at 9.1 GB resident: the
B_max search learns that a batch does not fit by running it, so the probe past
the limit always allocated past it (up to ``skip_factor`` times), in the
profiler's own process. Here each such probe runs in a child forked from the
profiler (it shares the model copy-on-write), with ``RLIMIT_DATA`` set so that
its data segment and private mappings — where every tensor lives — cannot grow
past the bound: an allocation beyond it fails inside the child, which reports
"stopped at the bound" and exits; the profiler's process never holds the
memory. ``RLIMIT_DATA`` needs no privileges (a cgroup would need a writable
hierarchy) and counts virtual memory, which for a training step is resident
memory plus tens of MiB the allocator mapped and did not touch, so the bound
errs on the safe side.

A child of a process that already used OpenMP threads hangs at its first
parallel region (GNU libgomp keeps the parent's thread pool, whose threads do
not exist in the child: measured here), so the child runs with one thread.
Peak memory does not depend on the thread count; step time does, which is why
times are measured in the profiler itself, on batches known to fit.
"""

from __future__ import annotations

import os
import pickle
import resource
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from rightsize.profiling.memory import status_bytes

#: Resident memory ``RLIMIT_DATA`` does not count: library code a step pages in (a
#: resnet18-cifar probe bounded at 1 GiB peaked at 1048 MiB resident without this margin).
UNCOUNTED_BYTES = 64 * 2**20
#: Failures inside the child that mean "out of memory at the bound".
_OOM_MARKERS = ("not enough memory", "can't allocate memory", "out of memory", "bad_alloc")


@dataclass(frozen=True)
class ChildResult:
    """What the child's function returned, or that it was stopped at the bound."""

    value: Any = None
    stopped: bool = False
    detail: str = ""  # why it was stopped


def run_bounded(fn: Callable[[], Any], resident_bytes: int) -> ChildResult:
    """Run ``fn`` in a forked child whose resident memory may reach ``resident_bytes``.

    ``fn``'s return value must pickle. An exception that is not a failed
    allocation is re-raised here as a RuntimeError carrying the child's traceback
    (a programming error stays loud).
    """
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read_end)
        _child(fn, resident_bytes, write_end)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        payload = pipe.read()
    _, status = os.waitpid(pid, 0)
    if not payload:  # killed before it could answer: by the kernel when memory ran out
        signal = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        return ChildResult(stopped=True, detail=f"probe process ended by signal {signal}")
    kind, value = pickle.loads(payload)
    if kind == "error":
        raise RuntimeError(f"a profiling probe failed in its child process:\n{value}")
    return ChildResult(value=value) if kind == "ok" else ChildResult(stopped=True, detail=value)


def _child(fn: Callable[[], Any], resident_bytes: int, write_end: int) -> None:
    code = 0
    try:
        torch.set_num_threads(1)  # see module docstring: libgomp after fork
        growth = resident_bytes - UNCOUNTED_BYTES - status_bytes("VmRSS")
        data = status_bytes("VmData") + max(0, growth)
        resource.setrlimit(resource.RLIMIT_DATA, (data, data))
        payload = ("ok", fn()) if growth > 0 else ("stopped", "already at the bound")
    except (MemoryError, RuntimeError) as exc:
        payload = ("stopped", str(exc).splitlines()[0]) if _is_oom(exc) else _error()
    except BaseException:  # noqa: BLE001 — everything goes back to the parent
        payload = _error()
    try:
        with os.fdopen(write_end, "wb") as pipe:
            pipe.write(pickle.dumps(payload))
    except BaseException:  # noqa: BLE001 — even pickling may fail at the bound
        code = 1
    os._exit(code)  # no atexit handlers, no buffers flushed twice: the parent owns those


def _is_oom(exc: BaseException) -> bool:
    return isinstance(exc, MemoryError) or any(m in str(exc).lower() for m in _OOM_MARKERS)


def _error() -> tuple[str, str]:
    return "error", traceback.format_exc()
