"""The profiler's memory bound: what a CPU profile may hold, and the child that enforces it."""

import resource

import pytest
import torch

from rightsize.core.errors import ResourceError
from rightsize.profiling.bound import (
    DEFAULT_CPU_MEMORY_FRACTION,
    PROCESS_MARGIN_BYTES,
    announce,
    cpu_bound,
)
from rightsize.profiling.bounded import UNCOUNTED_BYTES, run_bounded
from rightsize.profiling.memory import status_bytes

MiB = 2**20


def test_default_bound_is_a_share_of_the_free_memory_less_the_process_overhead():
    # 20 GiB free -> the process may hold 10 GiB; 400 MiB of it is the interpreter and torch,
    # 64 MiB is kept free for what a step measured alone does not show
    bound = cpu_bound(overhead_bytes=400 * MiB, free_bytes=20 * 1024 * MiB)
    assert DEFAULT_CPU_MEMORY_FRACTION == 0.5
    assert bound.process_bytes == 10 * 1024 * MiB and bound.source == "default"
    assert PROCESS_MARGIN_BYTES == 64 * MiB
    assert bound.limit_bytes == 10 * 1024 * MiB - 400 * MiB - 64 * MiB
    line = announce(4096, 5.0, bound, 20 * 1024 * MiB)
    assert "up to batch 4096 or a 5s step" in line and "50% of the 20Gi free" in line
    assert "--memory-limit" in line and "--max-batch" in line and "--max-step-time" in line


def test_memory_limit_bounds_the_whole_process():
    bound = cpu_bound(400 * MiB, 20 * 1024 * MiB, process_bytes=1024 * MiB)
    assert (bound.process_bytes, bound.limit_bytes) == (1024 * MiB, 560 * MiB)
    assert bound.source == "--memory-limit"
    assert "1Gi for this process" in bound.describe()


def test_a_tensor_limit_lets_the_process_hold_it_plus_its_overhead():
    bound = cpu_bound(400 * MiB, 20 * 1024 * MiB, tensor_bytes=256 * MiB)
    assert (bound.limit_bytes, bound.process_bytes) == (256 * MiB, 656 * MiB)


def test_a_limit_below_what_the_process_holds_is_refused_in_words():
    with pytest.raises(ResourceError, match="below a training step at batch 1: this process holds"):
        cpu_bound(400 * MiB, 20 * 1024 * MiB, process_bytes=300 * MiB)


def _allocate(mib: int):
    def run() -> int:
        block = torch.ones(mib * MiB // 4)  # touched, so it is resident
        return int(block.numel())

    return run


def test_a_child_within_its_bound_returns_its_value():
    rss = status_bytes("VmRSS")
    outcome = run_bounded(_allocate(16), rss + UNCOUNTED_BYTES + 128 * MiB)
    assert not outcome.stopped and outcome.value == 16 * MiB // 4


def test_a_child_past_its_bound_is_stopped_and_the_parent_never_holds_it():
    rss = status_bytes("VmRSS")
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    outcome = run_bounded(_allocate(512), rss + UNCOUNTED_BYTES + 64 * MiB)
    assert outcome.stopped and "allocate" in outcome.detail
    # the child's resident peak stayed near the bound, far below the 512 MiB it asked for
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    assert peak <= max(before, rss + UNCOUNTED_BYTES + 64 * MiB)
    assert status_bytes("VmRSS") < rss + 256 * MiB


def test_a_programming_error_in_the_child_stays_loud():
    def broken() -> None:
        raise KeyError("no such layer")

    with pytest.raises(RuntimeError, match="KeyError: 'no such layer'"):
        run_bounded(broken, status_bytes("VmRSS") + 512 * MiB)
