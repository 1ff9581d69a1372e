"""Parameter-server state, placement by bytes, accounting, and the worker's model view."""

import numpy as np
import pytest
import torch
from torch import nn

from rightsize.core.spec import Optimizer
from rightsize.runtime.accounting import count_log
from rightsize.runtime.model_io import EmbeddingLookups, gradients, layout_of, write_pulled
from rightsize.runtime.paramstore import OptimSettings, ParamStore, merge_groups
from rightsize.runtime.partition import bytes_per_ps, partition_by_bytes, repartition

SGD = OptimSettings(Optimizer.SGD, lr=0.5)
torch.sparse.check_sparse_tensor_invariants.disable()  # as the PS process does


def idx(*values):
    return np.array(values, dtype=np.int32)


def test_partition_places_largest_first_on_the_lightest_server():
    sizes = {"emb": 100, "w1": 60, "w2": 50, "b": 10}
    # emb -> ps-0 (100); w1 -> ps-1 (60); w2 -> ps-1 (110); b -> ps-0 (110)
    placement = partition_by_bytes(sizes, ["ps-0", "ps-1"])
    assert placement == {"emb": "ps-0", "w1": "ps-1", "w2": "ps-1", "b": "ps-0"}
    assert bytes_per_ps(placement, sizes) == {"ps-0": 110, "ps-1": 110}


def test_replacing_a_server_moves_only_its_tensors():
    sizes = {"a": 5, "b": 4, "c": 3}
    old = {"a": "ps-0", "b": "ps-1", "c": "ps-1"}
    assert repartition(old, sizes, ["ps-0", "ps-2"]) == {"a": "ps-0", "b": "ps-2", "c": "ps-2"}
    assert set(repartition(old, sizes, ["ps-0", "ps-1", "ps-2"]).values()) == {
        "ps-0", "ps-1", "ps-2"
    }  # fmt: skip
    with pytest.raises(ValueError):
        partition_by_bytes(sizes, [])


def test_a_key_is_applied_once_and_logged_with_its_indices():
    store = ParamStore({"w": torch.zeros(2)}, (), SGD)
    grad = {"w": torch.tensor([1.0, 2.0])}
    assert store.apply((0, 3, 1), idx(7, 8), grad, {})
    assert not store.apply((0, 3, 1), idx(7, 8), grad, {})  # a replay is ignored
    assert store.params["w"].tolist() == [-0.5, -1.0]  # one SGD step of lr 0.5
    assert [(k, i.tolist()) for k, i in store.groups[0].log] == [((0, 3, 1), [7, 8])]


def test_sparse_rows_only_touch_their_rows():
    store = ParamStore({"emb": torch.zeros(4, 2)}, {"emb"}, OptimSettings(Optimizer.ADAGRAD, 1.0))
    ids, values = torch.tensor([1, 3]), torch.ones(2, 2)
    store.apply((0, 0, 0), idx(0), {}, {"emb": (ids, values)})
    rows = store.rows("emb", torch.tensor([0, 1, 2, 3]))
    assert rows[0].tolist() == [0, 0] and rows[2].tolist() == [0, 0]
    assert rows[1].tolist() == pytest.approx([-1.0, -1.0])  # adagrad's first step is -lr
    empty = (torch.zeros(0, dtype=torch.long), torch.zeros(0, 2))
    assert store.apply((0, 0, 1), idx(1), {}, {"emb": empty})  # an empty update is fine


def test_repartition_keeps_histories_apart_until_they_agree():
    # a worker died between its pushes: key k reached ps-0 (tensor a) but not ps-1 (tensor b)
    k = (0, 0, 0)
    ps0 = ParamStore({"a": torch.zeros(1)}, (), SGD)
    ps1 = ParamStore({"b": torch.zeros(1)}, (), SGD)
    ps0.apply(k, idx(0, 1), {"a": torch.ones(1)}, {})
    merged = ParamStore.from_states([ps0.state_dict(), ps1.state_dict()], ["a", "b"], SGD)
    assert len(merged.groups) == 2
    # the replay of k applies to b only; a keeps its single update
    assert merged.apply(k, idx(0, 1), {"a": torch.ones(1), "b": torch.ones(1)}, {})
    assert merged.params["a"].item() == -0.5 and merged.params["b"].item() == -0.5
    for group in merged.groups:
        assert count_log(group.log, 2).exactly_once(1)
    assert len(merge_groups(merged.groups)) == 1  # now the histories agree


def test_state_round_trip_keeps_optimizer_state_by_name():
    store = ParamStore({"w": torch.ones(3)}, (), OptimSettings(Optimizer.ADAM, 0.1))
    store.apply((0, 0, 0), idx(0), {"w": torch.ones(3)}, {})
    again = ParamStore.from_states([store.state_dict()], ["w"], store.settings)
    before, after = store.state_dict()["optim"]["w"], again.state_dict()["optim"]["w"]
    assert torch.equal(before["exp_avg"], after["exp_avg"])
    with pytest.raises(KeyError):
        ParamStore.from_states([store.state_dict()], ["nope"], store.settings)


def test_accounting_counts_duplicates_and_misses():
    log = [((0, 0, 0), idx(0, 1)), ((0, 0, 1), idx(2, 1)), ((1, 0, 0), idx(0, 1, 2))]
    tally = count_log(log, 3)
    epoch0, epoch1 = tally.epochs
    assert (epoch0.applied, epoch0.duplicated, epoch0.missing) == (4, 1, 0)
    assert (epoch1.duplicated, epoch1.missing) == (0, 0)
    assert not tally.exactly_once(2)
    epoch1_only = count_log(log[2:], 3)
    assert not epoch1_only.exactly_once(1)  # epoch 0 is missing entirely
    assert count_log([((0, 0, 0), idx(2, 0, 1))], 3).exactly_once(1)


class TwoTables(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Embedding(10, 2), nn.Embedding(5, 2)
        self.head = nn.Linear(4, 1)

    def forward(self, ids):
        return self.head(torch.cat([self.a(ids[:, 0]), self.b(ids[:, 1])], 1)).squeeze(1)


def test_discovery_finds_the_rows_and_gradients_are_sparse():
    model = TwoTables()
    layout = layout_of(model)
    assert layout.sparse == {"a.weight", "b.weight"} and layout.dense == [
        "head.bias",
        "head.weight",
    ]
    lookups = EmbeddingLookups(layout)
    ids = torch.tensor([[1, 4], [1, 2], [7, 2]])
    found = lookups.discover((ids,))
    assert found["a.weight"].tolist() == [1, 7] and found["b.weight"].tolist() == [2, 4]
    write_pulled(
        layout,
        {"head.bias": torch.tensor([3.0])},
        {"a.weight": (torch.tensor([1]), torch.ones(1, 2))},
    )
    assert model.head.bias.item() == 3.0 and model.a.weight[1].tolist() == [1.0, 1.0]
    model(ids).sum().backward()
    dense, sparse = gradients(layout)
    assert set(dense) == {"head.bias", "head.weight"}
    rows, values = sparse["a.weight"]
    assert rows.tolist() == [1, 7] and values.shape == (2, 2)  # row 1 used twice, summed once


def test_a_lookup_outside_the_pulled_rows_is_fetched_on_the_spot():
    layout = layout_of(TwoTables())
    lookups = EmbeddingLookups(layout)
    fetched = []

    def fetch(table, missing):
        fetched.append((table, missing.tolist()))
        return torch.full((len(missing), 2), 9.0)

    lookups.guard({"a.weight": torch.tensor([1]), "b.weight": torch.tensor([0, 1, 2, 3, 4])}, fetch)
    layout.model(torch.tensor([[1, 0], [6, 3]]))
    lookups.release()
    assert fetched == [("a.weight", [6])] and layout.model.a.weight[6].tolist() == [9.0, 9.0]


def test_gradients_summed_from_the_discovery_pass_equal_the_coalesced_ones():
    ids = torch.tensor([[1, 4], [1, 2], [7, 2], [1, 4]])
    expected = {}
    for lookups_used in (False, True):
        torch.manual_seed(0)
        layout = layout_of(TwoTables())
        lookups = EmbeddingLookups(layout)
        lookups.discover((ids,))
        layout.model(ids).pow(2).sum().backward()
        _, sparse = gradients(layout, lookups if lookups_used else None)
        for name, (rows, values) in sparse.items():
            if lookups_used:
                want_rows, want_values = expected[name]
                assert torch.equal(rows, want_rows) and torch.allclose(values, want_values)
            expected[name] = (rows, values)
    assert expected["a.weight"][0].tolist() == [1, 7]
