"""The ElasticSampler's ledger: steps every rank can take together, and every sample once per
epoch across groups, saves, loads and kills — checked against a model's counts, not the
ledger's own books."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rightsize.runtime.sample_ledger import (
    LedgerError,
    SampleLedger,
    StreamSpec,
    rank_slice,
    step_sizes,
)

SPEC = StreamSpec(dataset_size=100, batch_size=8, seed=3, shuffle=True)


@pytest.mark.parametrize(
    ("remaining", "world", "batch", "expected"),
    [
        (100, 2, 8, [16] * 6 + [4]),  # a tail of 4 >= 2 ranks: its own step
        (33, 2, 8, [16, 9, 8]),  # a tail of 1 < 2 ranks shares the step before: 17 as 9 + 8
        (97, 4, 8, [32, 32, 17, 16]),  # a tail of 1: the last two steps split 33
        (3, 4, 8, [4]),  # fewer samples than ranks: one step of 4 (one sample repeated)
        (0, 2, 8, []),
        (5, 1, 8, [5]),
    ],
)
def test_steps_give_every_rank_one_to_batch_samples(remaining, world, batch, expected):
    sizes = step_sizes(remaining, world, batch)
    assert sizes == expected
    for size in sizes:
        parts = [rank_slice(size, world, r) for r in range(world)]
        lengths = [end - begin for begin, end in parts]
        assert min(lengths) >= 1 and max(lengths) <= batch  # every rank takes the step
        assert parts[0][0] == 0 and parts[-1][1] == size  # contiguous, no gap
        assert all(a[1] == b[0] for a, b in zip(parts, parts[1:], strict=False))


def test_ranks_of_a_step_get_disjoint_indices_in_the_epochs_order():
    ledger = SampleLedger()
    ledger.new_group(0, 3)
    seen = []
    for step in range(100):
        parts = [ledger.step(0, SPEC, 0, step, r) for r in range(3)]
        if parts[0][2]:
            break
        assert len({p[1] for p in parts}) == 1  # every rank is told the same step count
        seen += [i for p in parts for i in p[0].tolist()]
    assert sorted(seen) == list(range(100))


def test_a_sampler_that_changes_its_dataset_is_refused():
    ledger = SampleLedger()
    ledger.new_group(0, 1)
    ledger.step(0, SPEC, 0, 0, 0)
    with pytest.raises(LedgerError, match="every rank's sampler"):
        ledger.step(0, StreamSpec(99, 8, 3, True), 0, 1, 0)


def test_a_group_starts_where_the_checkpoint_it_loaded_stood():
    ledger = SampleLedger()
    ledger.new_group(0, 2)
    for step in range(3):
        ledger.step(0, SPEC, 0, step, 0)
    ledger.saving("/ckpt.pt", {0: {0: 2}})  # two steps of 16 applied when it saved
    ledger.saved("/ckpt.pt", (1, 10))
    ledger.new_group(1, 1)
    ledger.loaded("/ckpt.pt", (1, 10))
    indices, steps, _ = ledger.step(0, SPEC, 0, 0, 0)
    order = ledger.step(0, SPEC, 0, 0, 0)[0]
    assert steps == 9 and len(indices) == 8  # 68 left, one rank of 8
    assert np.array_equal(indices, order)
    assert ledger.redone == 8  # the new group's first step re-hands 8 of the third step's 16


def test_a_file_written_but_not_confirmed_holds_its_pending_state():
    ledger = SampleLedger()
    ledger.new_group(0, 1)
    ledger.step(0, SPEC, 0, 0, 0)
    ledger.saving("/c.pt", {0: {0: 1}})
    ledger.saved("/c.pt", (1, 10))
    ledger.step(0, SPEC, 0, 1, 0)
    ledger.saving("/c.pt", {0: {0: 2}})  # killed before "saved": the file changed on disk
    ledger.new_group(1, 1)
    ledger.loaded("/c.pt", (2, 10))  # not the confirmed file: the pending state
    assert ledger.prefixes({}) == {0: {0: 16}}
    ledger.new_group(2, 1)
    ledger.loaded("/c.pt", (1, 10))  # the confirmed file as it was: one step
    assert ledger.prefixes({}) == {0: {0: 8}}


def test_loading_nothing_starts_over_and_an_unknown_file_is_unverified():
    ledger = SampleLedger()
    ledger.new_group(0, 1)
    ledger.step(0, SPEC, 0, 0, 0)
    ledger.new_group(1, 1)
    ledger.loaded("/from-another-run.pt", (5, 5))
    assert ledger.unverified == ["/from-another-run.pt"]
    assert ledger.step(0, SPEC, 0, 0, 0)[1] == 13  # the whole epoch again


def test_the_ledger_survives_a_round_trip_through_json():
    ledger = SampleLedger()
    ledger.new_group(0, 2)
    ledger.step(0, SPEC, 0, 0, 0)
    ledger.saving("/c.pt", {0: {0: 1}})
    ledger.saved("/c.pt", (1, 2))
    again = SampleLedger.from_dict(ledger.to_dict())
    again.new_group(1, 2)
    again.loaded("/c.pt", (1, 2))
    assert again.prefixes({}) == {0: {0: 16}}  # the new group starts where the file stood
    assert again.summary(again.applied) == ledger.summary(ledger.applied)


# -- the property: exactly once per epoch, judged by a model's counts ----------------------
group = st.tuples(
    st.sampled_from([1, 2, 4]),  # world size
    st.integers(1, 40),  # steps before the group is killed (if epochs remain)
    st.integers(1, 6),  # it saves every this many steps
)


@settings(max_examples=150, deadline=None)
@given(st.lists(group, min_size=1, max_size=6), st.sampled_from([32, 64, 96]),
       st.sampled_from([4, 8]), st.integers(1, 3))  # fmt: skip
def test_every_sample_is_trained_exactly_once_per_epoch_across_kills(groups, size, batch, epochs):
    """A script that checkpoints its model and epoch every few steps, is killed, and resumes
    from its last checkpoint with another world size: its model's counts are what the
    checkpoints and the steps since say, so a count is right only if the ledger handed out
    each sample once per epoch from the state the script resumed."""
    spec = StreamSpec(size, batch, seed=1, shuffle=True)
    ledger = SampleLedger()
    counts = np.zeros(size, dtype=np.int64)  # the script's model
    checkpoint = None  # (counts, epoch) in the script's file
    generation = version = 0  # version: the file's mtime, one per save
    plan = list(groups)
    while True:
        world, kill_after, save_every = plan.pop(0) if plan else (1, 10**6, 1)
        ledger.new_group(generation, world)
        generation += 1
        if checkpoint is not None:
            counts, epoch0 = checkpoint[0].copy(), checkpoint[1]
            ledger.loaded("/ckpt", (version, 1))
        else:
            counts, epoch0 = np.zeros(size, dtype=np.int64), 0
        steps_taken, killed = 0, False
        for epoch in range(epoch0, epochs):
            step, applied = 0, {}
            while True:
                parts = [ledger.step(0, spec, epoch, step, r) for r in range(world)]
                if parts[0][2]:
                    break
                for indices, _, _ in parts:
                    counts[indices] += 1  # the optimizer step applies every rank's batch
                step += 1
                applied = {0: {epoch: step}}
                steps_taken += 1
                if steps_taken % save_every == 0:
                    ledger.saving("/ckpt", applied)
                    checkpoint, version = (counts.copy(), epoch), version + 1
                    ledger.saved("/ckpt", (version, 1))
                if steps_taken >= kill_after and plan:
                    killed = True
                    break
            if killed:
                break
            ledger.saving("/ckpt", {0: {epoch: step}})  # the script saves at the epoch's end
            checkpoint, version = (counts.copy(), epoch + 1), version + 1
            ledger.saved("/ckpt", (version, 1))
        if not killed:
            break
    if ledger.padded:
        return  # a group began an epoch with fewer samples left than ranks: repeats, counted
    assert counts.tolist() == [epochs] * size
