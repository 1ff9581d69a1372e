"""The shared stream: a trial's samples depend on the step and its batch, never on its pack."""

from __future__ import annotations

import pytest
import torch

from rightsize.core.errors import SpecError
from rightsize.packing.data import DataStream
from rightsize.workloads.datasets import make_dataset


@pytest.fixture(scope="module")
def digits():
    return make_dataset("digits")


def test_split_holds_out_a_fifth_of_digits(digits):
    stream = DataStream(digits, width=70)
    assert len(stream.val_indices) == 359 and len(stream.train_indices) == 1438  # round(1797 * 0.2)
    assert not set(stream.val_indices.tolist()) & set(stream.train_indices.tolist())
    # the split does not depend on the search seed
    assert torch.equal(DataStream(digits, width=70, seed=9).val_indices, stream.val_indices)


def test_a_trial_takes_the_first_rows_of_its_steps_block(digits):
    stream = DataStream(digits, width=70, seed=1)
    block = stream.rows(3, 70)
    assert torch.equal(stream.rows(3, 20), block[:20])  # batch 20 = a slice of the shared 70
    # block t covers training positions t*70 .. t*70+69 of epoch 0's permutation
    epoch0 = stream.train_indices[stream._epoch(0)]
    assert torch.equal(block, epoch0[210:280])


def test_blocks_run_on_across_epochs(digits):
    stream = DataStream(digits, width=70, seed=1)
    step = 1438 // 70  # block 20 starts at position 1400: 38 rows of epoch 0, 32 of epoch 1
    rows = stream.rows(step, 70)
    assert torch.equal(rows[:38], stream.train_indices[stream._epoch(0)][1400:])
    assert torch.equal(rows[38:], stream.train_indices[stream._epoch(1)][:32])
    assert not torch.equal(stream._epoch(0), stream._epoch(1))  # each epoch reshuffled


def test_batch_and_validation_gather_the_right_samples(digits):
    stream = DataStream(digits, width=70, seed=1)
    (x,), y = stream.batch(5, 30)
    (ref,), ref_y = digits.batch(stream.rows(5, 30))
    assert torch.equal(x, ref) and torch.equal(y, ref_y)
    chunks = stream.validation(100)
    assert [len(c[1]) for c in chunks] == [100, 100, 100, 59]
    with pytest.raises(ValueError, match="outside 1..70"):
        stream.rows(0, 71)


def test_synthetic_sets_split_only_their_distinct_rows():
    data = make_dataset("synthetic-cifar", num_samples=50_000)
    stream = DataStream(data, width=64)
    distinct = data.bank_rows
    assert len(stream.val_indices) + len(stream.train_indices) == distinct
    assert max(stream.train_indices.max(), stream.val_indices.max()) < distinct


def test_too_small_a_dataset_is_refused(digits):
    with pytest.raises(SpecError, match="too few"):
        DataStream(digits, width=1500)
