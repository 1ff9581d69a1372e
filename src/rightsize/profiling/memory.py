"""Measuring the peak memory of one training step, on a GPU or on the CPU.

On CUDA, PyTorch's allocator keeps a resettable high-water mark of tensor
memory. On the CPU there is no such counter, so the meter uses the kernel's:
it returns freed heap memory to the OS (``malloc_trim``), resets the process's
peak resident set (writing ``5`` to ``/proc/self/clear_refs``), runs the step and
reads ``VmHWM``. The step's growth over the resident set it started from, plus
the bytes of tensors already resident (parameters, optimizer state, the input
batch), is the step's peak — the same quantity ``max_memory_allocated`` gives
on a GPU, without counting the interpreter and libraries.
"""

from __future__ import annotations

import ctypes
import gc
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from rightsize.core.errors import ResourceError


class PeakMemoryMeter(ABC):
    """Runs a function and returns the peak bytes of device memory it held."""

    @abstractmethod
    def measure(self, step: Callable[[], None], resident_bytes: int) -> int:
        """Peak bytes while ``step`` runs, counting ``resident_bytes`` already held."""

    def settle(self) -> None:
        """Give back memory freed but still held, so that what follows starts from the floor."""
        return None  # CUDA's caching allocator is measured by its own counters, not the RSS


@contextmanager
def frozen_heap() -> Iterator[None]:
    """Collect garbage once, then set the survivors aside (``gc.freeze``) until the block ends.

    The CPU meter collects garbage before every measurement, so that no cycle
    freed mid-step hands the step memory the meter cannot see. With torch
    loaded a full collection takes ~50 ms; inside this block it walks only the
    objects made since, so a series of measurements pays it once.
    """
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


class CudaPeakMeter(PeakMemoryMeter):
    def __init__(self, device: torch.device) -> None:
        self.device = device

    def measure(self, step: Callable[[], None], resident_bytes: int) -> int:
        torch.cuda.synchronize(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        step()
        torch.cuda.synchronize(self.device)
        return int(torch.cuda.max_memory_allocated(self.device))  # resident tensors included


def status_bytes(key: str, status: Path = Path("/proc/self/status")) -> int:
    """A ``kB`` line of ``/proc/self/status`` (VmRSS, VmHWM, VmData) in bytes."""
    for line in status.read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise ResourceError(f"{status} has no {key}")


class CpuPeakMeter(PeakMemoryMeter):
    _CLEAR_REFS = Path("/proc/self/clear_refs")

    def __init__(self) -> None:
        if not self._CLEAR_REFS.exists():
            raise ResourceError(
                "measuring CPU peak memory needs Linux's /proc/self/clear_refs; "
                "profile on Linux or on a CUDA device"
            )
        try:
            self._trim = ctypes.CDLL("libc.so.6").malloc_trim
        except (OSError, AttributeError):
            self._trim = None  # non-glibc: freed memory may linger, peaks read a little low

    def measure(self, step: Callable[[], None], resident_bytes: int) -> int:
        start = self.settled_rss()
        self._CLEAR_REFS.write_text("5")  # resets VmHWM to the current RSS
        step()
        peak = status_bytes("VmHWM")
        return resident_bytes + max(0, peak - start)

    def settle(self) -> None:
        gc.collect()
        if self._trim is not None:
            self._trim(0)

    def settled_rss(self) -> int:
        """The process's resident bytes once garbage is collected and freed heap returned."""
        self.settle()
        return status_bytes("VmRSS")


def meter_for(device: torch.device) -> PeakMemoryMeter:
    return CudaPeakMeter(device) if device.type == "cuda" else CpuPeakMeter()


def tensor_bytes(tensors) -> int:
    """Bytes of distinct tensor storages among ``tensors`` (shared storage counted once)."""
    seen, total = set(), 0
    for t in tensors:
        if torch.is_tensor(t) and t.device.type != "meta":
            key = t.untyped_storage().data_ptr()
            if key not in seen:
                seen.add(key)
                total += t.untyped_storage().nbytes()
    return total


def saved_activation_bytes(step_forward: Callable[[], torch.Tensor], exclude: set[int]) -> int:
    """Bytes of tensors autograd saves for backward during ``step_forward()``.

    Args:
        step_forward: runs a forward pass and returns the loss.
        exclude: storage pointers not to count (parameters, the input batch).
    """
    seen: set[int] = set()
    total = [0]

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        key = storage.data_ptr()
        if key not in exclude and key not in seen:
            seen.add(key)
            total[0] += storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = step_forward()
    del loss
    return total[0]
