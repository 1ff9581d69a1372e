"""pack_opt (packing paper §5.3-§5.4): the distance, kNN's grouping rules, the baselines, capacity."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rightsize.core.errors import SpecError, UnknownNameError
from rightsize.packing.packopt import PackOptSettings, balance, distance, pack_opt, row_work
from rightsize.packing.space import Config, load_space, parse_space
from rightsize.packing.trial import spec_from_config

TABLE3 = Path(__file__).parents[1] / "examples" / "spaces" / "table3.yaml"
SPACE = load_space(TABLE3, ["activation", "hidden"])


def trial(name, batch, optimizer="sgd", lr=0.01, activation="relu"):
    config = Config(
        (("batch_size", batch), ("optimizer", optimizer), ("lr", lr), ("activation", activation))
    )
    return spec_from_config(config, name, seed=0)


class ScriptedRng:
    """Stands in for numpy's Generator: ``integers`` returns scripted positions."""

    def __init__(self, picks):
        self.picks = list(picks)

    def integers(self, high):
        pick = self.picks.pop(0)
        assert pick < high
        return pick


def ids(groups):
    return [[t.trial_id for t in g] for g in groups]


def test_distance_is_the_papers_worked_example():
    # §5.3: A [20, SGD, 0.01, ReLU] vs B [40, Adagrad, 0.01, ReLU] -> 4 (batch index) + 1 = 5
    a, b = trial("A", 20, "sgd"), trial("B", 40, "adagrad")
    assert distance(SPACE, a, b) == 5
    assert distance(SPACE, a, b, "euclidean") == pytest.approx(math.sqrt(17))
    # learning rate is numeric by index: 0.0001 -> 0.1 is 3 positions
    assert distance(SPACE, trial("C", 20, lr=0.0001), trial("D", 20, lr=0.1)) == 3
    assert distance(SPACE, trial("E", 20, activation="tanh"), trial("F", 20)) == 1


TRIALS = [
    trial("t0", 20),  # distances from t0: t1 1, t2 2, t3 10, t4 1 (activation)
    trial("t1", 25),
    trial("t2", 30),
    trial("t3", 70),
    trial("t4", 20, activation="tanh"),
]


def test_knn_packs_nearest_first_until_the_device_is_full():
    # capacity: 3 trials per pack. Centroid t0 (pick 0): nearest t1 (1), t4 (1, later in
    # order), t2 (2) -> [t0, t1, t4]. Remaining [t2, t3]: pick 1 -> centroid t3, then t2.
    groups = pack_opt(
        TRIALS, PackOptSettings("knn"), lambda g: len(g) <= 3, ScriptedRng([0, 1]), SPACE
    )
    assert ids(groups) == [["t0", "t1", "t4"], ["t3", "t2"]]


def test_knn_threshold_keeps_far_trials_apart():
    # threshold 1: only t1 and t4 are within 1 of t0; t2 (2) and t3 (10) are not
    groups = pack_opt(
        TRIALS, PackOptSettings("knn", threshold=1), lambda g: True, ScriptedRng([0, 0, 0]), SPACE
    )
    assert ids(groups) == [["t0", "t1", "t4"], ["t2"], ["t3"]]


def test_knn_stops_at_the_first_neighbour_that_does_not_fit():
    # memory admits t0 with t1 but not with t4 (the next nearest); t2 would fit but
    # "packs ... until the device runs out of memory": the group closes at t4
    def fits(group):
        return "t4" not in [t.trial_id for t in group] or len(group) == 1

    groups = pack_opt(
        TRIALS[:3] + TRIALS[4:], PackOptSettings("knn"), fits, ScriptedRng([0, 0, 0]), SPACE
    )
    # t0's group closes at t4 although t2 (distance 2) would fit; t2 then cannot take t4
    assert ids(groups) == [["t0", "t1"], ["t2"], ["t4"]]


def test_batch_size_pack_never_mixes_batch_sizes():
    trials = [trial(f"t{i}", b) for i, b in enumerate([20, 25, 20, 20, 25])]
    groups = pack_opt(
        trials, PackOptSettings("batch-size"), lambda g: len(g) <= 2, np.random.default_rng(0)
    )
    assert ids(groups) == [["t0", "t2"], ["t3"], ["t1", "t4"]]


def test_random_pack_fills_groups_of_m_in_a_shuffled_order():
    trials = [trial(f"t{i}", 20) for i in range(7)]
    groups = pack_opt(
        trials, PackOptSettings("random", max_pack_size=3), lambda g: True, np.random.default_rng(3)
    )
    assert [len(g) for g in groups] == [3, 3, 1]
    order = [trials[i].trial_id for i in np.random.default_rng(3).permutation(7)]
    assert [t for g in ids(groups) for t in g] == order


def test_no_packing_is_singletons():
    assert ids(
        pack_opt(TRIALS, PackOptSettings("none"), lambda g: True, np.random.default_rng(0))
    ) == [[t.trial_id] for t in TRIALS]


def test_settings_are_validated():
    with pytest.raises(UnknownNameError, match="did you mean 'random'"):
        PackOptSettings("randon")
    with pytest.raises(SpecError, match="threshold must be >= 0"):
        PackOptSettings("knn", threshold=-1)
    with pytest.raises(SpecError, match="max pack size must be >= 1"):
        PackOptSettings("knn", max_pack_size=0)


SMALL = parse_space(
    {
        "batch_size": [16, 32, 48, 64],
        "optimizer": ["sgd", "adam"],
        "lr": [0.1, 0.01],
        "activation": ["relu", "tanh"],
    },
    ["activation"],
)


@settings(max_examples=60, deadline=None)
@given(
    picks=st.lists(st.integers(0, SMALL.size - 1), min_size=1, max_size=24, unique=True),
    capacity=st.integers(16, 200),
    strategy=st.sampled_from(["knn", "random", "batch-size", "none"]),
    threshold=st.sampled_from([0.0, 1.0, 2.0, math.inf]),
    seed=st.integers(0, 2**16),
)
def test_every_trial_lands_in_exactly_one_group_that_fits(
    picks, capacity, strategy, threshold, seed
):
    trials = [spec_from_config(SMALL.config(p), f"t{p}", 0) for p in picks]

    def fits(group):  # a pack "needs" the sum of its batch sizes
        return sum(t.batch_size for t in group) <= capacity

    groups = pack_opt(
        trials, PackOptSettings(strategy, threshold), fits, np.random.default_rng(seed), SMALL
    )
    assert sorted(t.trial_id for g in groups for t in g) == sorted(t.trial_id for t in trials)
    assert all(len(g) == 1 or fits(g) for g in groups)
    if strategy == "batch-size":
        assert all(len({t.batch_size for t in g}) == 1 for g in groups)
    if strategy == "knn":
        assert all(distance(SMALL, g[0], t) <= threshold for g in groups for t in g)


def test_balance_reshapes_groups_while_that_shortens_the_busiest_worker():
    def sizes(groups, workers, fits=lambda group: True):
        made = [[trial(f"t{i}-{k}", 20) for k in range(n)] for i, n in enumerate(groups)]
        return [len(g) for g in balance(made, workers, fits)]

    # a group costs its trials + 2. [10]: 12 on one worker; halved, [5, 5]: 7 | 7
    assert sizes([10], 2) == [5, 5] and sizes([10], 1) == [10]
    # [7, 3]: 9 | 5. Moving a trial: [6, 4], 8 | 6, then [5, 5], 7 | 7; halving [7] instead
    # gives [4, 3, 3]: 6 | 10
    assert sizes([7, 3], 2) == [5, 5]
    # a move must fit: with groups of at most 3 the [3] cannot grow; halving [7] is worse
    assert sizes([7, 3], 2, fits=lambda group: len(group) <= 3) == [7, 3]
    assert sizes([5, 5], 2) == [5, 5] and sizes([1], 2) == [1]


def test_balance_keeps_pack_opts_order_within_a_group():
    group = [trial(f"t{k}", 20) for k in range(5)]
    assert balance([group], 2, lambda g: True) == [group[:3], group[3:]]


def test_balance_by_rows_evens_out_the_workers_rows():
    # rows + UPDATE_ROWS (27): a, b weigh 100, c, d 28 (mean 64); a pack costs 2 more trials
    a, b, c, d = (trial(name, batch) for name, batch in (("a", 73), ("b", 73), ("c", 1), ("d", 1)))
    group = [a, b, c, d]
    # by count the halves are even: [a, b] | [c, d]; by rows that is 5.125 | 2.875 trials,
    # and moving b over gives [a] 3.5625 | [c, d, b] 4.4375
    assert balance([group], 2, lambda g: True) == [[a, b], [c, d]]
    assert balance([group], 2, lambda g: True, work=row_work(group)) == [[c, d, b], [a]]
