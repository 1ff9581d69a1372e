"""What the launcher installs into a rank's interpreter before the user's script runs.

Nothing here changes what the script computes; every hook observes and passes
the call through:

- **optimizer steps** — PyTorch's global ``register_optimizer_step_post_hook``: a step
  of any ``torch.optim`` optimizer (through a ``GradScaler`` too, which skips the
  step on overflow, and then so do we). With several optimizers, the most-stepped
  one's count is the job's steps.
- **samples** — the batch a DDP model's forward received (its first tensor's leading
  dimension, when gradients are on), else the last batch a ``DataLoader`` returned,
  counted at the next ``backward()``: evaluation batches have no backward.
- **loss** — the scalar ``backward()`` was called on.
- **bytes** — gloo's and NCCL's traffic is invisible from here: a DDP model's ring
  allreduce moves ``2 (W - 1) / W`` of its gradient bytes each way per step, counted
  at each optimizer step (the same estimate the runtime's own allreduce ranks report).
- **data** — a ``DataLoader`` over an :class:`rightsize.torch.ElasticSampler` gets its
  :class:`ElasticBatchSampler` (one batch per step as the master cut it), and each
  returned batch tells which step the script has reached.
- **checkpoint files** — ``torch.save`` and ``torch.load`` of a path tell the launcher
  before and after (the sample ledger ties data to the script's own checkpoints).
- **rendezvous** — how long ``init_process_group`` took.

Everything runs on the script's own thread; the launcher's reporter thread only reads.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any, Protocol

import torch


class Probe(Protocol):
    """What the hooks tell (the launcher, :mod:`script_rank`)."""

    def on_step(self, optimizer: torch.optim.Optimizer) -> None: ...
    def on_forward(self, args: Any) -> None: ...
    def on_batch(self, loader_iter: Any, batch: Any) -> None: ...
    def on_backward(self, loss: torch.Tensor) -> None: ...
    def on_ddp(self, model: torch.nn.Module) -> None: ...
    def on_save(self, path: str, done: bool) -> None: ...
    def on_load(self, path: str, seconds: float) -> None: ...
    def on_rendezvous(self, seconds: float) -> None: ...


def batch_length(batch: Any) -> int:
    """The leading dimension of the first tensor in a batch (nested lists, tuples, dicts)."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else 1
    if isinstance(batch, dict):
        batch = list(batch.values())
    if isinstance(batch, (list, tuple)):
        for item in batch:
            n = batch_length(item)
            if n:
                return n
    return 0


def file_path(f: Any) -> str | None:
    """The absolute path torch.save/load was given (a path, or a file object with a name)."""
    name = f if isinstance(f, (str, os.PathLike)) else getattr(f, "name", None)
    if not isinstance(name, (str, os.PathLike)):
        return None
    return os.path.abspath(os.fspath(name))


def install(probe: Probe) -> Callable[[], None]:
    """Install every hook; returns a function that removes them."""
    undo: list[Callable[[], None]] = []
    from torch.optim.optimizer import register_optimizer_step_post_hook

    handle = register_optimizer_step_post_hook(
        lambda optimizer, _args, _kwargs: probe.on_step(optimizer)
    )
    undo.append(handle.remove)
    undo.append(_wrap(torch.Tensor, "backward", _before(lambda loss, *_a, **_k: (
        probe.on_backward(loss) if loss.numel() == 1 else None))))  # fmt: skip
    undo.append(_install_data(probe))
    undo.append(_install_files(probe))
    undo.append(_install_distributed(probe))
    return lambda: [u() for u in reversed(undo)]


def _wrap(owner: Any, name: str, make: Callable[[Callable], Callable]) -> Callable[[], None]:
    original = getattr(owner, name)
    setattr(owner, name, make(original))
    return lambda: setattr(owner, name, original)


def _before(hook: Callable) -> Callable[[Callable], Callable]:
    def make(original: Callable) -> Callable:
        def wrapped(*args, **kwargs):
            hook(*args, **kwargs)
            return original(*args, **kwargs)

        wrapped.__wrapped__ = original
        return wrapped

    return make


def _install_data(probe: Probe) -> Callable[[], None]:
    from torch.utils.data import DataLoader
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    from rightsize.torch import ElasticSampler

    def make_init(original: Callable) -> Callable:
        def __init__(loader, *args, **kwargs):
            original(loader, *args, **kwargs)
            sampler = loader.sampler
            if isinstance(sampler, ElasticSampler) and sampler.elastic and loader.batch_size:
                sampler.batch_size = loader.batch_size
                # DataLoader refuses to change its batch sampler once built: set it underneath
                object.__setattr__(loader, "batch_sampler", sampler.batches())

        __init__.__wrapped__ = original
        return __init__

    def make_next(original: Callable) -> Callable:
        def __next__(loader_iter):
            batch = original(loader_iter)
            probe.on_batch(loader_iter, batch)
            return batch

        __next__.__wrapped__ = original
        return __next__

    undo = [_wrap(DataLoader, "__init__", make_init),
            _wrap(_BaseDataLoaderIter, "__next__", make_next)]  # fmt: skip
    return lambda: [u() for u in undo]


def _install_files(probe: Probe) -> Callable[[], None]:
    def make_save(original: Callable) -> Callable:
        def save(obj, f, *args, **kwargs):
            path = file_path(f)
            if path is not None:
                probe.on_save(path, done=False)
            result = original(obj, f, *args, **kwargs)
            if path is not None:
                probe.on_save(path, done=True)
            return result

        save.__wrapped__ = original
        return save

    def make_load(original: Callable) -> Callable:
        def load(f, *args, **kwargs):
            started = time.monotonic()
            result = original(f, *args, **kwargs)
            path = file_path(f)
            if path is not None:
                probe.on_load(path, time.monotonic() - started)
            return result

        load.__wrapped__ = original
        return load

    serialization = torch.serialization
    undo = [_wrap(torch, "save", make_save), _wrap(torch, "load", make_load)]
    if serialization.save is not torch.save:  # a script may call either name
        undo += [_wrap(serialization, "save", make_save), _wrap(serialization, "load", make_load)]
    return lambda: [u() for u in undo]


def _install_distributed(probe: Probe) -> Callable[[], None]:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    def make_init_group(original: Callable) -> Callable:
        def init_process_group(*args, **kwargs):
            started = time.monotonic()
            result = original(*args, **kwargs)
            probe.on_rendezvous(time.monotonic() - started)
            return result

        init_process_group.__wrapped__ = original
        return init_process_group

    def make_ddp(original: Callable) -> Callable:
        def __init__(model, *args, **kwargs):
            original(model, *args, **kwargs)
            model.register_forward_pre_hook(_forward_batch(probe))
            probe.on_ddp(model)

        __init__.__wrapped__ = original
        return __init__

    undo = [_wrap(dist, "init_process_group", make_init_group),
            _wrap(DistributedDataParallel, "__init__", make_ddp)]  # fmt: skip
    return lambda: [u() for u in undo]


def _forward_batch(probe: Probe) -> Callable:
    def hook(_module, args):
        if torch.is_grad_enabled():  # a training forward: its batch is counted at backward
            probe.on_forward(args)

    return hook
