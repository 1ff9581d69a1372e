"""Keeping freed heap memory in the process, so training steps stop paying for page faults.

A training step on the CPU allocates and frees the same large tensors every
step (activations, gradients). glibc serves blocks above its mmap threshold
(128 KiB at start) with fresh ``mmap`` calls and returns the top of the heap to
the kernel when more than its trim threshold is free; either way the next step
touches new pages and takes a page fault per 4 KiB. A pack of 8 MLP-3 trials
took ~1,000-2,600 minor faults per step and ran ~30% slower than with the
settings below (docs/tuning.md). ``retain_freed_memory`` raises both thresholds
(``mallopt``), the usual remedy short of linking jemalloc or tcmalloc. It is a
process-wide setting, so ``rightsize tune`` applies it once at start (unless
``--allocator default``) and the packing benchmarks apply it to every variant
they compare, packed and unpacked alike.
"""

from __future__ import annotations

import ctypes
from enum import StrEnum

# glibc's mallopt parameter numbers (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

#: Largest block served from the heap rather than mmap (glibc's cap on 64-bit).
MMAP_THRESHOLD_BYTES = 32 * 2**20
#: Free memory at the top of the heap kept before any is returned to the kernel.
TRIM_THRESHOLD_BYTES = 2**30

class AllocatorMode(StrEnum):
    """A tuning worker's allocator: ``retain`` freed memory (mallopt above) or glibc's ``default``."""

    RETAIN = "retain"
    DEFAULT = "default"


ALLOCATOR_MODES: tuple[str, ...] = tuple(AllocatorMode)


def retain_freed_memory(
    mmap_threshold_bytes: int = MMAP_THRESHOLD_BYTES,
    trim_threshold_bytes: int = TRIM_THRESHOLD_BYTES,
) -> bool:
    """Raise glibc's mmap and trim thresholds; False where that is not possible (not glibc)."""
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    ok = mallopt(_M_MMAP_THRESHOLD, mmap_threshold_bytes) == 1
    return mallopt(_M_TRIM_THRESHOLD, trim_threshold_bytes) == 1 and ok
