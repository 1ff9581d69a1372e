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
"""

from __future__ import annotations

import io
import pickle
import queue
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.multiprocessing as mp

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
    (``benchmarks/packing_overheads.py``), and a search moves hundreds of
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


def _serve(recipe: Callable[[], Any], tasks, results) -> None:
    """A worker: build the trainer once, then train groups until told to stop (``None``)."""
    trainer = recipe()
    while (task := tasks.get()) is not None:
        index, payload = task
        try:
            members, target = loads(payload)
            results.put((index, dumps(trainer.train_group(members, target)), None))
        except Exception as exc:  # noqa: BLE001 - sent back, raised in the parent
            results.put((index, None, f"{type(exc).__name__}: {exc}"))


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

    def run(self, groups: Sequence[Sequence[Any]], target: int, local: Any = None) -> list[Any]:
        """Each group's outcome, in the order given; the largest groups start first.

        ``local``: the parent's own trainer; it takes groups from the same queue
        while the workers do (None: the parent only waits).
        """
        self._start()
        order = sorted(range(len(groups)), key=lambda i: -len(groups[i]))
        for index in order:
            self._tasks.put((index, dumps((list(groups[index]), target))))
        outcomes: dict[int, Any] = {}
        drained = local is None  # nobody adds tasks during a run: once empty, only results remain
        while len(outcomes) < len(groups):
            task = None if drained else self._own_task()
            if task is not None:  # the parent's own: its groups, not their bytes
                index = task[0]
                outcomes[index] = local.train_group(list(groups[index]), target)
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
        """Stop the workers (idempotent)."""
        for _ in self._processes:
            self._tasks.put(None)
        for process in self._processes:
            process.join(STOP_TIMEOUT_S)
            if process.is_alive():
                process.terminate()
        self._processes = []

    def _start(self) -> None:
        if self._processes:
            return
        context = mp.get_context(start_method())
        self._tasks, self._results = context.Queue(), context.Queue()
        for _ in range(self.processes):
            process = context.Process(
                target=_serve, args=(self._recipe, self._tasks, self._results), daemon=True
            )
            process.start()
            self._processes.append(process)

    def _next_result(self):
        while True:
            try:
                return self._results.get(timeout=POLL_S)
            except queue.Empty:
                dead = [p.exitcode for p in self._processes if not p.is_alive()]
                if dead:
                    self.close()
                    raise RuntimeError(f"a training worker died (exit codes {dead})") from None
