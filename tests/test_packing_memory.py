"""Memory of a pack (packing paper §4.5, §5.2): hand-checked estimates and the capacity bound."""

from __future__ import annotations

import pytest
import torch

from rightsize.core.errors import ResourceError
from rightsize.packing.memory import (
    Footprint,
    PackMemory,
    measure_footprint,
    saved_activation_slope,
)
from rightsize.packing.optimizers import OptimizerSpec
from rightsize.packing.trial import TrialSpec
from rightsize.profiling.memory import CpuPeakMeter
from rightsize.workloads.registry import WorkloadRegistry

# 1,000 parameter bytes, 10 activation bytes per sample, 2 input bytes per sample
FOOTPRINT = Footprint(param_bytes=1000, activation_bytes_per_sample=10, input_bytes_per_sample=2)


def trial(name, batch, kind="sgd", activation="relu"):
    return TrialSpec(name, batch, OptimizerSpec(kind, 0.1), (("activation", activation),))


def test_trial_bytes_count_weights_gradients_optimizer_state_and_activations():
    memory = PackMemory(lambda options: FOOTPRINT, capacity_bytes=10**6)
    assert memory.trial_bytes(trial("a", 20, "sgd")) == 1000 * 2 + 10 * 20  # 2,200
    assert memory.trial_bytes(trial("a", 20, "momentum")) == 1000 * 3 + 200  # 3,200
    assert memory.trial_bytes(trial("a", 20, "adagrad")) == 3200
    assert memory.trial_bytes(trial("a", 20, "adam")) == 1000 * 4 + 200  # 4,200


def test_a_padded_fused_group_charges_every_trial_the_largest_batch():
    specs = [trial("a", 20), trial("b", 50), trial("c", 30, activation="tanh")]
    padded = PackMemory(lambda options: FOOTPRINT, 10**6, pad=True)
    exact = PackMemory(lambda options: FOOTPRINT, 10**6, pad=False)
    # shared batch 50 * 2 = 100; relu group computed at 50: 2 * (2000 + 500); tanh at 30: 2300
    assert padded.pack_bytes(specs) == 100 + 2 * 2500 + 2300
    # exact: each trial at its own batch: 2200 + 2500 + 2300
    assert exact.pack_bytes(specs) == 100 + 2200 + 2500 + 2300


def test_fits_is_the_capacity_bound():
    memory = PackMemory(lambda options: FOOTPRINT, capacity_bytes=4800, headroom=1.0)
    assert memory.fits([trial("a", 20), trial("b", 20)])  # 40 + 2 * 2200 = 4440
    assert not memory.fits([trial("a", 20), trial("b", 20), trial("c", 20)])  # 6640


def test_the_headroom_is_charged_before_the_capacity():
    memory = PackMemory(lambda options: FOOTPRINT, capacity_bytes=5500, headroom=1.25)
    assert memory.needed_bytes([trial("a", 20)]) == 2240 * 1.25  # 2,800
    assert not memory.fits([trial("a", 20), trial("b", 20)])  # 4440 * 1.25 = 5550 > 5500
    with pytest.raises(ValueError, match="headroom"):
        PackMemory(lambda options: FOOTPRINT, 5500, headroom=0.9)


def test_a_trial_that_does_not_fit_alone_is_a_one_line_error():
    memory = PackMemory(lambda options: FOOTPRINT, capacity_bytes=3000)
    with pytest.raises(ResourceError) as info:
        memory.check_alone([trial("a", 20), trial("b", 70, "adam")])
    # (140 + 4000 + 700) * 1.25 = 6,050 bytes
    assert "batch_size=70 optimizer=adam needs 5.91Ki" in str(info.value)
    assert "raise --memory-limit" in str(info.value)


def test_measured_footprint_of_mlp3():
    footprint = measure_footprint(WorkloadRegistry().get("mlp3", "digits"))
    assert footprint.param_bytes == 150_794 * 4  # the zoo's documented parameter count
    assert footprint.input_bytes_per_sample == 64 * 4 + 8  # 8x8 float image + int64 label
    # saved for backward per sample: at least the three hidden layers' 256 activations
    assert footprint.activation_bytes_per_sample >= 3 * 256 * 4


def test_measured_footprint_covers_a_real_steps_peak():
    # the small CNN's backward holds activation gradients beyond what it saves
    workload = WorkloadRegistry().get("small-cnn", "digits")
    footprint = measure_footprint(workload)
    memory = PackMemory(lambda options: footprint, capacity_bytes=0)
    spec = TrialSpec("t", 64, OptimizerSpec("sgd", 0.1))
    model = workload.make_model(0)
    batch = workload.example_batch(64)

    def step():
        model.zero_grad(set_to_none=True)
        workload.loss(model, batch).backward()

    step()
    resident = footprint.param_bytes + int(footprint.input_bytes_per_sample * 64)
    # the same step measured again stays within what admission charges (estimate x headroom)
    assert CpuPeakMeter().measure(step, resident) <= memory.needed_bytes([spec])
    # and more than the bytes saved for backward alone would have charged
    saved = saved_activation_slope(workload, model, torch.device("cpu"))
    assert footprint.activation_bytes_per_sample > saved


def test_a_frozen_heap_collects_once_and_sets_the_survivors_aside_only_inside():
    import gc

    from rightsize.profiling.memory import frozen_heap

    class Node:
        pass

    def cycle():
        a, b = Node(), Node()
        a.other, b.other = b, a

    before = gc.get_freeze_count()
    cycle()  # garbage only a collection can free
    with frozen_heap():
        assert gc.get_freeze_count() > before  # the survivors are set aside
        assert not [o for o in gc.get_objects() if isinstance(o, Node)]  # the cycle was freed
        cycle()
        assert gc.collect() >= 2  # a collection inside still frees what came after
    assert gc.get_freeze_count() == 0  # back to normal collections
