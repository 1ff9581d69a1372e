"""Dynamic data sharding (DLRover §5.2, §5.4): queues, leases, snapshots, and exactly-once."""

import copy

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

from rightsize.runtime.shards import ShardManager, ShardPlan, StragglerRule, Task


def test_plan_cuts_shards_and_batches_by_hand():
    # 10 samples, shards of 4 -> shards of 4, 4, 2; batches of 3 -> 2, 2, 1 batches
    plan = ShardPlan(10, 4, 3, epochs=2, shuffle=False)
    assert plan.num_shards == 3
    assert [plan.batches_in(s) for s in range(3)] == [2, 2, 1]
    assert plan.steps_per_epoch == 5 and plan.steps_total == 10
    assert plan.indices(0, 1).tolist() == [4, 5, 6, 7]
    assert plan.batch_indices((0, 1, 1)).tolist() == [7]
    assert plan.batch_length(2, 0) == 2


def test_shuffle_is_a_permutation_per_epoch_and_deterministic():
    plan = ShardPlan(50, 8, 4, epochs=2, seed=3)
    for epoch in (0, 1):
        order = np.concatenate([plan.indices(epoch, s) for s in range(plan.num_shards)])
        assert sorted(order.tolist()) == list(range(50))
    assert plan.indices(0, 0).tolist() != plan.indices(1, 0).tolist()
    assert (
        plan.indices(1, 2).tolist() == ShardPlan(50, 8, 4, epochs=2, seed=3).indices(1, 2).tolist()
    )


def test_lease_progress_finish_and_epoch_advance():
    manager = ShardManager(ShardPlan(8, 4, 2, epochs=2, shuffle=False))
    a = manager.lease("w0")
    assert a.task == Task(0, 0, 0, 2)
    assert manager.lease("w0") is a  # idempotent while held
    b = manager.lease("w1")
    assert b.task == Task(0, 1, 0, 2)
    assert manager.lease("w2") is None  # TODO empty, DOING not: wait
    assert manager.progress("w0", a.task, 1) and manager.batches_done == 1
    assert not manager.progress("w1", a.task, 2)  # not w1's lease
    assert manager.finish("w0", a.task) and manager.finish("w1", b.task)
    assert manager.epoch == 0 and manager.samples_done == 8
    assert manager.lease("w2").task == Task(1, 0, 0, 2)  # both queues drained: epoch 1
    assert manager.epoch == 1


def test_a_failed_worker_returns_the_rest_of_its_task():
    manager = ShardManager(ShardPlan(8, 8, 2, epochs=1, shuffle=False))
    lease = manager.lease("w0")
    manager.progress("w0", lease.task, 3)
    assert manager.release("w0") == Task(0, 0, 3, 4)
    assert manager.lease("w1").task == Task(0, 0, 3, 4)


def test_snapshot_folds_leases_back_into_todo():
    manager = ShardManager(ShardPlan(12, 4, 2, epochs=1, shuffle=False))
    lease = manager.lease("w0")
    manager.progress("w0", lease.task, 1)
    snap = manager.snapshot()
    assert snap["todo"][0] == [0, 0, 1, 2] and snap["batches_done"] == 1
    restored = ShardManager(manager.plan, snap)
    assert restored.lease("w9").task == Task(0, 0, 1, 2) and not restored.doing.keys() - {"w9"}


def test_steps_mode_caps_leases_at_the_remaining_steps():
    manager = ShardManager(ShardPlan(100, 10, 2, epochs=None, steps=3, shuffle=False))
    lease = manager.lease("w0")
    assert lease.task == Task(0, 0, 0, 3)  # 5 batches in the shard, only 3 steps left
    assert manager.lease("w1") is None
    manager.finish("w0", lease.task)
    assert manager.finished


def test_straggler_gets_half_a_shard():
    rule = StragglerRule(speed_ratio=0.5, shard_fraction=0.5)
    # median of (10, 10, 4) is 10; 4 < 0.5 * 10 -> straggler; 6 is not
    assert rule.fraction(4.0, [10.0, 10.0, 4.0]) == 0.5
    assert rule.fraction(6.0, [10.0, 10.0, 6.0]) == 1.0
    assert rule.fraction(1.0, [1.0]) == 1.0  # one worker: nobody to compare with
    manager = ShardManager(ShardPlan(16, 8, 2, epochs=1, shuffle=False))
    assert manager.lease("slow", 0.5).task == Task(0, 0, 0, 2)  # 2 of the shard's 4 batches
    assert manager.lease("fast").task == Task(0, 0, 2, 4)  # the remainder stays first in TODO


# -- the exactly-once protocol under faults ---------------------------------------------------
class Protocol:
    """A model of the runtime's protocol: PS apply each key once per group and log it;
    workers report progress only after every PS applied the batch; checkpoints take the
    shard snapshot first and the PS states later; a restore rolls both back together."""

    def __init__(self, plan: ShardPlan, n_ps: int, n_workers: int) -> None:
        self.plan = plan
        self.manager = ShardManager(plan)
        self.ps = [{"applied": set(), "log": []} for _ in range(n_ps)]
        self.workers = {f"w{i}": None for i in range(n_workers)}  # -> [task, batch, pushed]
        self.pending = None  # shard snapshot of a checkpoint in progress
        self.saved = None  # (snapshot, ps states)

    def lease(self, w: str, half: bool) -> None:
        if self.workers[w] is None:
            lease = self.manager.lease(w, 0.5 if half else 1.0)
            if lease is not None:
                self.workers[w] = [lease.task, lease.next_batch, set()]

    def push(self, w: str, p: int) -> None:
        state = self.workers[w]
        if state is None:
            return
        task, batch, pushed = state
        key = (task.epoch, task.shard, batch)
        ps = self.ps[p]
        if key not in ps["applied"]:
            ps["applied"].add(key)
            ps["log"].append((key, self.plan.batch_indices(key)))
        pushed.add(p)

    def report(self, w: str) -> None:
        state = self.workers[w]
        if state is None or len(state[2]) < len(self.ps):
            return
        task, batch, _ = state
        ok = (
            self.manager.finish(w, task)
            if batch + 1 == task.end
            else self.manager.progress(w, task, batch + 1)
        )
        self.workers[w] = [task, batch + 1, set()] if ok and batch + 1 < task.end else None

    def fail(self, w: str) -> None:
        self.manager.release(w)
        self.workers[w] = None

    def checkpoint_begin(self) -> None:
        self.pending = self.manager.snapshot()

    def checkpoint_end(self) -> None:
        if self.pending is not None:
            self.saved = (self.pending, copy.deepcopy(self.ps))
            self.pending = None

    def restore(self) -> None:
        snapshot, ps = self.saved if self.saved else (None, None)
        self.manager = ShardManager(self.plan, snapshot)
        self.ps = copy.deepcopy(ps) if ps else [{"applied": set(), "log": []} for _ in self.ps]
        self.workers = dict.fromkeys(self.workers)
        self.pending = None

    def run_to_completion(self) -> None:
        for _ in range(10_000):
            if self.manager.finished:
                return
            for w in self.workers:
                self.lease(w, False)
                for p in range(len(self.ps)):
                    self.push(w, p)
                self.report(w)
        raise AssertionError("the job did not finish")

    def work(self, w: str, half: bool, servers: list[int], report: bool) -> None:
        """Lease if needed, push the current batch to ``servers`` (in that order), maybe report."""
        self.lease(w, half)
        for p in servers:
            self.push(w, p)
        if report:
            self.report(w)


class ProtocolMachine(RuleBasedStateMachine):
    """Random interleavings of work, worker failures, checkpoints and restores; at the end
    the job is driven to completion and every PS's log must hold every index once per epoch."""

    @initialize(
        size=st.integers(1, 40),
        shard=st.integers(1, 9),
        batch=st.integers(1, 4),
        epochs=st.integers(1, 3),
        n_ps=st.integers(1, 3),
        n_workers=st.integers(1, 3),
    )
    def setup(self, size, shard, batch, epochs, n_ps, n_workers):
        self.size, self.epochs = size, epochs
        self.protocol = Protocol(
            ShardPlan(size, shard, batch, epochs=epochs, seed=1), n_ps, n_workers
        )

    @rule(w=st.integers(0, 2), half=st.booleans(), servers=st.lists(st.integers(0, 2), max_size=4),
          report=st.booleans())  # fmt: skip
    def work(self, w, half, servers, report):
        protocol = self.protocol
        worker = f"w{w % len(protocol.workers)}"
        protocol.work(worker, half, [p % len(protocol.ps) for p in servers], report)

    @rule(w=st.integers(0, 2))
    def fail(self, w):
        self.protocol.fail(f"w{w % len(self.protocol.workers)}")

    @rule()
    def checkpoint_begin(self):
        self.protocol.checkpoint_begin()

    @rule()
    def checkpoint_end(self):
        self.protocol.checkpoint_end()

    @rule()
    def restore(self):
        self.protocol.restore()

    def teardown(self):
        if not hasattr(self, "protocol"):
            return
        self.protocol.run_to_completion()
        for ps in self.protocol.ps:
            for epoch in range(self.epochs):
                seen = [i for key, idx in ps["log"] if key[0] == epoch for i in idx.tolist()]
                assert sorted(seen) == list(range(self.size)), f"epoch {epoch}"
            assert {key[0] for key, _ in ps["log"]} <= set(range(self.epochs))


ProtocolMachine.TestCase.settings = settings(
    max_examples=200, stateful_step_count=40, deadline=None
)
test_every_index_applied_exactly_once_per_epoch_on_every_ps = ProtocolMachine.TestCase


@settings(max_examples=100, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from("lpfrs"), st.sampled_from(["a", "b"])), max_size=60))
def test_queues_never_lose_or_duplicate_a_batch(ops):
    plan = ShardPlan(23, 5, 2, epochs=1, shuffle=False)
    manager = ShardManager(plan)
    for op, w in ops:
        lease = manager.lease_of(w)
        if op == "l":
            manager.lease(w, 0.5)
        elif op == "p" and lease:
            manager.progress(w, lease.task, min(lease.task.end, lease.next_batch + 1))
        elif op == "f" and lease:
            manager.finish(w, lease.task)
        elif op == "r":
            manager.release(w)
        elif op == "s":
            manager = ShardManager(plan, manager.snapshot())
        # the batches not yet done are covered exactly once by TODO and DOING
        left = [(t.shard, b) for t in manager.todo for b in range(t.begin, t.end)]
        left += [(le.task.shard, b) for le in manager.doing.values()
                 for b in range(le.next_batch, le.task.end)]  # fmt: skip
        assert len(left) == len(set(left))
        assert len(left) + manager.batches_done == plan.steps_per_epoch


def test_plan_rejects_nonsense():
    with pytest.raises(ValueError):
        ShardPlan(0, 4, 2)
    with pytest.raises(ValueError):
        ShardPlan(10, 4, 2, epochs=None, steps=None)
