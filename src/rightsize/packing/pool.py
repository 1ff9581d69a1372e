"""Training a rung's groups in parallel worker processes: the whole device, one pack per core.

On this CPU the device is several cores. Two OpenMP threads inside one pack
barely help (each trial's products are small, ~45 rows, and the threads meet
at a barrier after every one of them), so :class:`WorkerPool` uses the cores
the other way: the parent and ``processes`` spawned workers with one torch
thread each, every one training whole packs. A rung's (or a phase's) groups go
to whichever is free, largest first; the parent trains groups too, so the
workers' start-up (~2 s: a fresh interpreter importing torch) costs no idle
core. Packing never changes a trial's result, so neither does
the worker that trains it: a worker builds the same data stream and the same
models from the same seeds, and checkpoints travel as pickled bytes, each
tensor as its raw buffer (:class:`_CheckpointPickler`), through a pipe, not
shared-memory file descriptors, so hundreds of checkpoints in flight cannot
run out of descriptors.

Workers start on first use (their start-up is part of the search's time) and
stop at :meth:`WorkerPool.close`. A parent that runs one torch thread forks
them (:func:`start_method`): a forked worker is ready at once, where a spawned
one first spends ~2 s importing torch while the parent trains the first rung
alone. With more threads (or CUDA initialised) the parent's OpenMP or CUDA
state cannot be forked safely, and workers are spawned. A worker that fails sends its error back,
and the search stops with it; one that dies is noticed within
:data:`POLL_S` seconds.

Interrupts belong to the parent. Ctrl-C sends SIGINT to the terminal's whole
foreground process group; workers ignore it, so only the parent raises
``KeyboardInterrupt`` (the CLI's one line ``error: interrupted``), and a run
that ends in any exception terminates its workers at once (SIGTERM, which a
worker leaves at its default action: it ends without a word) instead of
letting them finish the groups still queued. A worker also never outlives its
parent: Linux's parent-death signal kills it if the parent dies without
stopping it (``kill -TERM`` of the parent alone, say).
"""

from __future__ import annotations

import io
import os
import pickle
import queue
import signal
from collections.abc import Callable, Sequence
from multiprocessing import queues
from typing import Any

import torch
import torch.multiprocessing as mp

from rightsize.core.processes import die_with_parent

#: How often the parent checks that its workers are alive while it waits.
POLL_S = 1.0
#: How long the parent waits for a queued group before it only collects results
#: (a queue's feeder thread may lag a moment behind ``put``).
OWN_TASK_WAIT_S = 0.05
#: How long a worker may take to stop before it is terminated.
STOP_TIMEOUT_S = 10.0


def start_method() -> str:
    """``fork`` when this process's torch state forks safely, else ``spawn``.

    With one intra-op thread torch never opens an OpenMP parallel region, so no
    thread pool exists for a forked child to inherit half-initialised; CUDA never
    survives a fork.
    """
    if torch.get_num_threads() == 1 and not torch.cuda.is_initialized():
        return "fork"
    return "spawn"


#: Tensor dtypes ``Tensor.numpy`` and ``torch.from_numpy`` carry unchanged.
NUMPY_DTYPES = frozenset(
    {torch.float16, torch.float32, torch.float64, torch.int8, torch.int16, torch.int32,
     torch.int64, torch.uint8, torch.bool, torch.complex64, torch.complex128}
)  # fmt: skip


class _CheckpointPickler(pickle.Pickler):
    """Pickles a plain CPU tensor as its NumPy array: the raw bytes in one copy.

    ``torch.save`` writes a zip archive with a record per storage: 3.9x slower
    to write and 3.7x slower to read for MLP-3 checkpoints with Adam's state
    (``benchmarks/tune/packing_overheads.py``), and a search moves hundreds of
    them. The bytes are the same either way, so a trial's result cannot depend
    on the codec. Anything else (a dtype NumPy lacks, a view with gaps, a
    tensor needing gradients, a device tensor) takes the default path.
    """

    def reducer_override(self, obj):
        if type(obj) is torch.Tensor and _as_array(obj):
            return torch.from_numpy, (obj.numpy(),)
        return NotImplemented


def _as_array(tensor: torch.Tensor) -> bool:
    return (
        tensor.device.type == "cpu"
        and tensor.dtype in NUMPY_DTYPES
        and tensor.is_contiguous()
        and not tensor.requires_grad
    )


def dumps(value: Any) -> bytes:
    """``value`` (checkpoints and all) as bytes for a pipe."""
    buffer = io.BytesIO()
    _CheckpointPickler(buffer, protocol=5).dump(value)
    return buffer.getvalue()


def loads(data: bytes) -> Any:
    """The value :func:`dumps` wrote (trusted: our own workers)."""
    return pickle.loads(data)


def _serve(recipe: Callable[[], Any], tasks, results, parent_pid: int) -> None:
    """A worker: build the trainer once, then train groups until told to stop (``None``)."""
    _leave_signals_to(parent_pid)
    trainer = recipe()
    while (task := tasks.get()) is not None:
        index, payload = task
        try:
            members, target = loads(payload)
            results.put((index, dumps(trainer.train_group(members, target)), None))
        except Exception as exc:  # noqa: BLE001 - sent back, raised in the parent
            results.put((index, None, f"{type(exc).__name__}: {exc}"))


def _leave_signals_to(parent_pid: int) -> None:
    """Make this worker ignore Ctrl-C, end quietly on SIGTERM, and die with its parent.

    The worker starts with SIGINT blocked (:meth:`WorkerPool._start`), so a Ctrl-C
    that arrives while it starts stays pending until it is ignored here, and is
    then discarded.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a forked worker inherits the parent's
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    die_with_parent(parent_pid)


class _Tasks(queues.Queue):
    """The groups waiting for a worker, which a stopped pool can abandon quietly.

    A queue's feeder thread writes what ``put`` buffered into a pipe, blocking
    while the pipe is full (checkpoints are larger than its 64 KiB). Once the
    workers are killed nobody reads it: :meth:`abandon` closes the parent's read
    end too, so the pending writes fail with EPIPE at once and the thread ends,
    without the traceback a queue prints for a failed write and without being
    cut off at exit, where it would hold one of the queue's locks (a named
    semaphore) past their clean-up: the resource tracker's "leaked semaphore"
    warning.
    """

    def abandon(self) -> None:
        self._reader.close()
        self.close()
        self.join_thread()

    def _on_queue_feeder_error(self, e, obj):
        if not isinstance(e, BrokenPipeError):  # an abandoned group
            super()._on_queue_feeder_error(e, obj)


class WorkerPool:
    """``processes`` spawned workers, each training whole groups with its own trainer.

    Args:
        processes: worker processes to spawn (the parent makes one more trainer).
        recipe: builds a worker's trainer, an object with
            ``train_group(members, target) -> outcome``; it must pickle
            (a module-level function or a ``functools.partial`` of one).
    """

    def __init__(self, processes: int, recipe: Callable[[], Any]) -> None:
        if processes < 1:
            raise ValueError(f"processes must be >= 1, got {processes}")
        self.processes, self._recipe = processes, recipe
        self._processes: list = []
        self._tasks = self._results = None

    def run(
        self,
        groups: Sequence[Sequence[Any]],
        target: int | Sequence[int],
        local: Any = None,
        work: Sequence[float] | None = None,
    ) -> list[Any]:
        """Each group's outcome, in the order given; the largest groups start first.

        ``target``: one step for all groups, or one per group.
        ``local``: the parent's own trainer; it takes groups from the same queue
        while the workers do (None: the parent only waits).
        ``work``: each group's size for the order (default: its members; groups going to
        different steps give their trial-steps, so the longest starts first).
        """
        self._start()
        targets = [target] * len(groups) if isinstance(target, int) else list(target)
        sizes = [len(g) for g in groups] if work is None else list(work)
        try:
            return self._run(groups, targets, local, sizes)
        except BaseException:  # KeyboardInterrupt too: queued groups must not keep workers busy
            self._terminate()
            raise

    def _run(
        self, groups: Sequence[Sequence[Any]], targets: list[int], local: Any, sizes: list[float]
    ) -> list[Any]:
        order = sorted(range(len(groups)), key=lambda i: -sizes[i])
        for index in order:
            self._tasks.put((index, dumps((list(groups[index]), targets[index]))))
        outcomes: dict[int, Any] = {}
        drained = local is None  # nobody adds tasks during a run: once empty, only results remain
        while len(outcomes) < len(groups):
            task = None if drained else self._own_task()
            if task is not None:  # the parent's own: its groups, not their bytes
                index = task[0]
                outcomes[index] = local.train_group(list(groups[index]), targets[index])
                continue
            drained = True
            index, payload, error = self._next_result()
            if error is not None:
                raise RuntimeError(f"a training worker failed on group {index}: {error}")
            outcomes[index] = loads(payload)
        return [outcomes[i] for i in range(len(groups))]

    def _own_task(self):
        """A queued group for the parent, or None when the queue is drained."""
        try:
            return self._tasks.get(timeout=OWN_TASK_WAIT_S)
        except queue.Empty:
            return None

    def close(self) -> None:
        """Stop the workers once they finish what they hold (idempotent)."""
        for _ in self._processes:
            self._tasks.put(None)
        for process in self._processes:
            process.join(STOP_TIMEOUT_S)
            if process.is_alive():
                process.terminate()
        self._processes = []

    def _terminate(self) -> None:
        """Stop the workers now, abandoning queued groups and their results."""
        for process in self._processes:
            process.terminate()
        for process in self._processes:
            process.join(STOP_TIMEOUT_S)
            if process.is_alive():
                process.kill()
                process.join()
        self._processes = []
        self._tasks.abandon()

    def _start(self) -> None:
        if self._processes:
            return
        context = mp.get_context(start_method())
        self._tasks, self._results = _Tasks(ctx=context), context.Queue()
        # a worker starts with SIGINT blocked (a fork or an exec keeps the mask), so a
        # Ctrl-C during its start-up waits until the worker ignores it
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            for _ in range(self.processes):
                process = context.Process(
                    target=_serve,
                    args=(self._recipe, self._tasks, self._results, os.getpid()),
                    daemon=True,
                )
                process.start()
                self._processes.append(process)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    def _next_result(self):
        while True:
            try:
                return self._results.get(timeout=POLL_S)
            except queue.Empty:
                dead = [p.exitcode for p in self._processes if not p.is_alive()]
                if dead:  # run() stops the others
                    raise RuntimeError(f"a training worker died (exit codes {dead})") from None
