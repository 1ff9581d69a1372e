"""The search-space file: the paper's Table 3, and the errors a user can make in one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rightsize.core.errors import SpecError
from rightsize.packing.space import load_space, parse_space

EXAMPLES = Path(__file__).parents[1] / "examples" / "spaces"
OPTIONS = ["hidden", "activation"]  # mlp3's model options


def test_table3_has_the_papers_1056_configurations():
    space = load_space(EXAMPLES / "table3.yaml", OPTIONS)
    assert space.size == 11 * 4 * 6 * 4 == 1056
    assert space.values("batch_size") == tuple(range(20, 71, 5))
    assert space.values("lr") == (1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1)
    assert space.numeric == {"batch_size", "lr"}
    assert len(set(space)) == 1056


def test_configs_are_indexed_row_major_and_sampled_without_replacement():
    space = parse_space(
        {"batch_size": [8, 16], "optimizer": ["sgd", "adam"], "lr": ["1e-3"]}, OPTIONS
    )
    assert [c.as_dict() for c in space] == [
        {"batch_size": 8, "optimizer": "sgd", "lr": 0.001},
        {"batch_size": 8, "optimizer": "adam", "lr": 0.001},
        {"batch_size": 16, "optimizer": "sgd", "lr": 0.001},
        {"batch_size": 16, "optimizer": "adam", "lr": 0.001},
    ]
    sample = space.sample(10, np.random.default_rng(0))
    assert len(sample) == 4 and len(set(sample)) == 4  # capped at the space, no repeats
    assert space.sample(3, np.random.default_rng(5)) == space.sample(3, np.random.default_rng(5))


@pytest.mark.parametrize(
    "data, message",
    [
        ({"batch_size": [8], "optimizer": ["sgd"], "lr": [0.1], "activaton": ["relu"]},
         "unknown hyper-parameter 'activaton'; did you mean 'activation'?"),
        ({"batch_size": [], "optimizer": ["sgd"], "lr": [0.1]}, "batch_size is an empty list"),
        ({"batch_size": [8], "optimizer": ["sgd"]}, "lr is missing"),
        ({"batch_size": [8, 8], "optimizer": ["sgd"], "lr": [0.1]}, "batch_size lists 8 twice"),
        ({"batch_size": [0], "optimizer": ["sgd"], "lr": [0.1]}, "must be a whole number >= 1"),
        ({"batch_size": [8], "optimizer": ["adamw"], "lr": [0.1]}, "unknown optimizer 'adamw'"),
        ({"batch_size": [8], "optimizer": ["sgd"], "lr": ["fast"]}, "lr value 'fast' is not a number"),
        ({"batch_size": [8], "optimizer": ["sgd"], "lr": [-0.1]}, "lr -0.1 must be > 0"),
        ({"batch_size": {"from": 8, "to": 4, "step": 2}, "optimizer": ["sgd"], "lr": [0.1]}, "to >= from"),
        ([1, 2], "expected a mapping"),
    ],
)  # fmt: skip
def test_bad_spaces_say_what_to_change(data, message):
    with pytest.raises(SpecError) as info:
        parse_space(data, OPTIONS, "space s.yaml")
    assert message in str(info.value) and str(info.value).startswith("space s.yaml")


def test_unreadable_and_invalid_files(tmp_path):
    with pytest.raises(SpecError, match="cannot read space"):
        load_space(tmp_path / "missing.yaml", OPTIONS)
    bad = tmp_path / "bad.yaml"
    bad.write_text("batch_size: [1, 2\n")
    with pytest.raises(SpecError, match="not valid YAML"):
        load_space(bad, OPTIONS)


def test_a_factory_workload_accepts_any_extra_key():
    space = parse_space(
        {"batch_size": [8], "optimizer": ["sgd"], "lr": [0.1], "depth": [2, 3]}, None
    )
    assert space.model_options() == ["depth"] and "depth" in space.numeric
