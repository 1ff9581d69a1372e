"""How much memory a profile may use: a bound on the profiler's process, and a step's share of it.

On a GPU the B_max search compares a step's peak tensor memory with the
device's memory, as Srift does. On a CPU the memory is the machine's, shared
with everything else on it, and ``--memory-limit`` is what the user allows the
profiler's process to hold — measured as its resident set, interpreter and
libraries included (a limit of 8Gi once peaked at 9.1 GB resident because only
tensors were counted). So on a CPU the search's limit for a step is the process
bound less what the process held before any step (its ``overhead``) and a
margin, and every
probe runs where the kernel enforces the bound (``profiling/bounded.py``).
Without a limit a CPU profile takes ``DEFAULT_CPU_MEMORY_FRACTION`` of the
memory the machine has free, not all of it: a B_max search that fills a shared
machine's RAM makes every other process on it swap or die.
"""

from __future__ import annotations

from dataclasses import dataclass

from rightsize.core.errors import ResourceError
from rightsize.core.units import format_bytes, format_duration

#: Share of the free memory a CPU profile may use when no limit is given.
DEFAULT_CPU_MEMORY_FRACTION = 0.5
#: Kept free under a process bound when deciding that a step fits: the timing phase
#: alternates batch sizes, and the heap it leaves behind grows the process past what one
#: step measured alone (a 628 MiB bound: probes peaked at 562 MiB, the timing phase at 619).
PROCESS_MARGIN_BYTES = 64 * 2**20
#: Longest training step ``rightsize profile`` accepts on a CPU by default: its timing phase
#: runs about 15 steps at each sampled batch, so B_max's step time sets the profile's length.
DEFAULT_CPU_MAX_STEP_S = 5.0


@dataclass(frozen=True)
class MemoryBound:
    """What the B_max search may use.

    Attributes:
        limit_bytes: the most a training step's peak (tensors) may reach.
        source: ``--memory-limit``, ``default`` (a share of the free memory) or ``device``.
        process_bytes: CPU: the bound on each profiling process's resident memory.
        overhead_bytes: CPU: what the process held before any step (interpreter,
            libraries, buffers), less the model's own tensors.
    """

    limit_bytes: int
    source: str
    process_bytes: int | None = None
    overhead_bytes: int | None = None

    def describe(self) -> str:
        """``"2Gi for this process (--memory-limit); 1.6Gi for a step's tensors"``."""
        if self.process_bytes is None:
            return f"{format_bytes(self.limit_bytes)} ({self.source})"
        return (
            f"{format_bytes(self.process_bytes)} for this process ({self.source}), of which "
            f"{format_bytes(self.limit_bytes)} for a step's tensors"
        )


def cpu_bound(
    overhead_bytes: int,
    free_bytes: int,
    process_bytes: int | None = None,
    tensor_bytes: int | None = None,
    fraction: float = DEFAULT_CPU_MEMORY_FRACTION,
) -> MemoryBound:
    """The bound of a CPU profile: from a process limit, a tensor limit, or the default.

    Args:
        overhead_bytes: the process's resident memory before any step, less its tensors.
        free_bytes: memory this process could still use (``cpu_memory_capacity``).
        process_bytes: a bound on the whole process (``--memory-limit``).
        tensor_bytes: a limit on a step's tensors alone (``Profiler.run``'s
            ``memory_limit_bytes``); the process may hold that plus its overhead.

    Raises:
        ResourceError: a process bound below what the process already holds.
    """
    if process_bytes is not None and tensor_bytes is not None:
        raise ValueError("give a process bound or a tensor limit, not both")
    if tensor_bytes is not None:
        return MemoryBound(tensor_bytes, "--memory-limit", tensor_bytes + overhead_bytes,
                           overhead_bytes)  # fmt: skip
    source = "--memory-limit" if process_bytes is not None else "default"
    if process_bytes is None:
        process_bytes = int(fraction * free_bytes)
    if process_bytes <= overhead_bytes + PROCESS_MARGIN_BYTES:
        raise ResourceError(
            f"memory limit {format_bytes(process_bytes)} is below a training step at batch 1: "
            f"this process holds {format_bytes(overhead_bytes)} before any step (Python, "
            "torch and their buffers); raise --memory-limit"
        )
    limit = process_bytes - overhead_bytes - PROCESS_MARGIN_BYTES
    return MemoryBound(limit, source, process_bytes, overhead_bytes)


def announce(max_batch: int, max_step_s: float | None, bound: MemoryBound, free_bytes: int) -> str:
    """The B_max search's bounds, said before it starts, with the flags that change them."""
    time_bound = f" or a {format_duration(max_step_s)} step" if max_step_s else ""
    default = (
        f": {DEFAULT_CPU_MEMORY_FRACTION:.0%} of the {format_bytes(free_bytes)} free"
        if bound.source == "default" else ""
    )  # fmt: skip
    return (
        f"B_max search up to batch {max_batch}{time_bound}, memory bound "
        f"{bound.describe()}{default}; --memory-limit, --max-batch and --max-step-time change it"
    )
