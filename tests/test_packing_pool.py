"""The worker pool: groups trained in real worker processes, outcomes in order, errors surfaced."""

from __future__ import annotations

import os
import signal
import time
from functools import partial

import pytest

from rightsize.packing.pool import WorkerPool, dumps, loads, start_method


class Doubler:
    """A stand-in trainer: ``train_group`` doubles the members (fails on a negative one)."""

    trained = 0

    def train_group(self, members, target):
        self.trained += 1
        if any(m < 0 for m in members):
            raise ValueError(f"negative member in {members}")
        return [2 * m + target for m in members]


def make_doubler() -> Doubler:
    return Doubler()


class SlowDoubler(Doubler):
    """A worker busy 50 ms per group: whoever else asks the queue meanwhile gets groups."""

    def train_group(self, members, target):
        time.sleep(0.05)
        return super().train_group(members, target)


def make_slow_doubler() -> SlowDoubler:
    return SlowDoubler()


def test_outcomes_come_back_in_the_order_of_the_groups():
    pool = WorkerPool(2, partial(make_doubler))
    try:
        groups = [[1], [2, 3, 4], [], [5, 6]]  # the largest starts first, order is kept
        assert pool.run(groups, 10) == [[12], [14, 16, 18], [], [20, 22]]
        assert pool.run([[7]], 0) == [[14]]  # the same workers serve the next call
    finally:
        pool.close()
    pool.close()  # idempotent


def test_a_failing_group_stops_the_run_with_the_workers_message():
    pool = WorkerPool(1, partial(make_doubler))
    try:
        with pytest.raises(RuntimeError, match="ValueError: negative member in \\[-1\\]"):
            pool.run([[1], [-1]], 0)
    finally:
        pool.close()


def test_checkpoints_travel_as_bytes_unchanged():
    import torch

    value = {"w": torch.arange(6.0).view(2, 3), "step": 3}
    back = loads(dumps(value))
    assert torch.equal(back["w"], value["w"]) and back["step"] == 3


def test_every_kind_of_tensor_comes_back_bit_for_bit_and_writable():
    import torch

    g = torch.Generator().manual_seed(0)
    value = {
        "f32": torch.randn(5, 3, generator=g),
        "f64": torch.randn(4, dtype=torch.float64, generator=g),
        "nan": torch.tensor([float("nan"), -0.0, float("inf")]),
        "step": torch.tensor(7.0),  # 0-dim, as torch.optim keeps it
        "rng": torch.Generator().manual_seed(3).get_state(),  # uint8
        "ints": torch.arange(6, dtype=torch.int64),
        "mask": torch.tensor([True, False]),
        "bf16": torch.randn(3, generator=g).to(torch.bfloat16),  # NumPy has no bfloat16
        "transposed": torch.randn(3, 4, generator=g).t(),  # not contiguous: strides kept
        "grad": torch.randn(2, generator=g, requires_grad=True),
        "nested": [(torch.ones(2), "label")],
    }
    back = loads(dumps(value))
    for name, tensor in value.items():
        if name == "nested":
            continue
        got = back[name]
        assert got.dtype == tensor.dtype and got.shape == tensor.shape, name
        assert got.stride() == tensor.stride(), name
        assert got.requires_grad == tensor.requires_grad, name
        assert torch.equal(_bits(got), _bits(tensor)), name
    assert torch.equal(back["nested"][0][0], torch.ones(2)) and back["nested"][0][1] == "label"
    back["f32"].add_(1)  # a checkpoint is loaded into training tensors: it must be writable
    assert torch.equal(back["f32"], value["f32"] + 1)


def _bits(tensor):
    import torch

    return tensor.detach().contiguous().reshape(-1).view(torch.uint8)


def test_the_parent_trains_groups_too():
    # a forked worker (one torch thread) is ready at once and an instant one could take
    # every group before the parent asks; a busy one cannot, forked or spawned
    pool = WorkerPool(1, partial(make_slow_doubler))
    try:
        local = Doubler()
        groups = [[k] for k in range(12)]
        assert pool.run(groups, 1, local=local) == [[2 * k + 1] for k in range(12)]
        assert local.trained > 0
    finally:
        pool.close()


class PidReporter:
    """Answers a group with its process's id; a negative member takes a minute, 99 kills it."""

    def train_group(self, members, target):
        if 99 in members:
            os._exit(3)
        if any(m < 0 for m in members):
            time.sleep(60)
        return os.getpid()


def make_pid_reporter() -> PidReporter:
    return PidReporter()


class Interrupted:
    """The parent's trainer when Ctrl-C arrives mid-group."""

    def train_group(self, members, target):
        raise KeyboardInterrupt


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_workers_ignore_ctrl_c_which_is_the_parents_to_handle():
    # a terminal sends SIGINT to the whole foreground group, workers included
    pool = WorkerPool(1, partial(make_pid_reporter))
    try:
        (worker,) = pool.run([[0]], 0)
        os.kill(worker, signal.SIGINT)
        time.sleep(0.2)
        assert pool.run([[1]], 0) == [worker]  # alive, and still serving
    finally:
        pool.close()


def test_an_interrupted_run_stops_its_workers_at_once(capfd):
    pool = WorkerPool(1, partial(make_pid_reporter))
    try:
        (worker,) = pool.run([[0]], 0)
        started = time.monotonic()
        # the worker is busy for a minute; the groups behind it fill the pipe (~2 MB)
        busy, *queued = [[-1] + [0] * 100_000] + [[0] * 100_000 for _ in range(10)]
        with pytest.raises(KeyboardInterrupt):
            pool.run([busy, *queued], 0, local=Interrupted())
        assert _gone(worker) and time.monotonic() - started < 10
        assert "Traceback" not in capfd.readouterr().err  # nor from the queue's feeder thread
        assert pool.run([[1]], 0) != [worker]  # the next run starts fresh workers
    finally:
        pool.close()


def test_a_worker_that_dies_stops_the_run_and_the_other_workers():
    pool = WorkerPool(2, partial(make_pid_reporter))
    try:
        workers = set(pool.run([[0], [1]], 0))
        with pytest.raises(RuntimeError, match=r"a training worker died \(exit codes \[3\]\)"):
            pool.run([[-1], [99]], 0)  # one worker dies, the other is busy for a minute
        assert all(_gone(pid) for pid in workers)
    finally:
        pool.close()


def test_processes_must_be_positive():
    with pytest.raises(ValueError, match="processes must be >= 1"):
        WorkerPool(0, partial(make_doubler))


def test_workers_are_forked_only_from_a_single_threaded_parent():
    import torch

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert start_method() == "fork"  # no OpenMP pool to inherit: ready at once
        torch.set_num_threads(2)
        assert start_method() == "spawn"
    finally:
        torch.set_num_threads(before)
