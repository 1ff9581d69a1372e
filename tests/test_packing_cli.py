"""``rightsize tune``: the bracket table, one-line errors, and a small search end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rightsize.cli.main import main

SMALL_SPACE = """\
batch_size: [16, 24, 32]
optimizer: [adam, momentum]
lr: [0.01, 0.1]
activation: [relu, tanh]
"""


@pytest.fixture(autouse=True, scope="module")
def restore_threads():
    before = torch.get_num_threads()  # --threads sets the process's torch threads
    yield
    torch.set_num_threads(before)


@pytest.fixture
def space(tmp_path) -> Path:
    path = tmp_path / "space.yaml"
    path.write_text(SMALL_SPACE)
    return path


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_schedule_only_prints_the_bracket_table(capsys):
    code, out, _ = run(
        capsys, "tune", "--schedule-only", "--max-resource", "81", "--eta", "3", "--json"
    )
    assert code == 0
    assert json.loads(out) == [
        {"s": 4, "rungs": [{"n": 81, "r": 1}, {"n": 27, "r": 3}, {"n": 9, "r": 9}, {"n": 3, "r": 27}, {"n": 1, "r": 81}]},
        {"s": 3, "rungs": [{"n": 34, "r": 3}, {"n": 11, "r": 9}, {"n": 3, "r": 27}, {"n": 1, "r": 81}]},
        {"s": 2, "rungs": [{"n": 15, "r": 9}, {"n": 5, "r": 27}, {"n": 1, "r": 81}]},
        {"s": 1, "rungs": [{"n": 8, "r": 27}, {"n": 2, "r": 81}]},
        {"s": 0, "rungs": [{"n": 5, "r": 81}]},
    ]  # fmt: skip
    code, out, _ = run(capsys, "tune", "--schedule-only")
    assert code == 0 and "(34,3) (11,9) (3,27) (1,81)" in out


def test_schedule_only_for_successive_halving(capsys):
    code, out, _ = run(
        capsys, "tune", "--schedule-only", "--algorithm", "successive-halving", "--json"
    )
    assert code == 0
    assert json.loads(out) == [
        {"s": 4, "rungs": [{"n": 143, "r": 1}, {"n": 47, "r": 3}, {"n": 15, "r": 9}, {"n": 5, "r": 27}, {"n": 1, "r": 81}]},
    ]  # fmt: skip


def assert_one_line_error(code, err, fragment):
    assert code == 2
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert fragment in err and "Traceback" not in err


@pytest.mark.parametrize(
    "text, fragment",
    [
        (SMALL_SPACE + "activaton: [relu]\n", "did you mean 'activation'?"),
        (SMALL_SPACE.replace("[0.01, 0.1]", "[]"), "lr is an empty list"),
        (SMALL_SPACE.replace("tanh", "swish"), "activation value 'swish' does not build the model"),
    ],
)
def test_bad_space_files(capsys, tmp_path, text, fragment):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    assert_one_line_error(
        *run(capsys, "tune", "--space", str(path), "--allocator", "default")[::2], fragment
    )


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--eta", "1"], "eta must be > 1"),
        (["--max-resource", "0"], "max resource R must be >= 1"),
        (
            ["--memory-limit", "1Mi"],
            "but the device has 1Mi; raise --memory-limit",  # the need is measured
        ),
        (["--workload", "mlp4"], "unknown workload 'mlp4'; did you mean 'mlp3'?"),
        (["--pack", "nearest"], "invalid choice: 'nearest'"),
    ],
)
def test_bad_arguments(capsys, space, args, fragment):
    code, _, err = run(capsys, "tune", "--space", str(space), "--allocator", "default", *args)
    assert_one_line_error(code, err, fragment)


def test_schedule_only_checks_eta_too(capsys):
    code, _, err = run(capsys, "tune", "--schedule-only", "--eta", "0.5")
    assert_one_line_error(code, err, "eta must be > 1")


def search(capsys, space, pack, *extra):
    code, out, err = run(
        capsys, "tune", "--space", str(space), "--max-resource", "9", "--eta", "3",
        "--steps-per-unit", "2", "--pack", pack, "--seed", "4", "--threads", "1",
        "--allocator", "default", "--json", *extra,
    )  # fmt: skip
    assert code == 0, err
    return json.loads(out), err


def test_packed_and_original_hyperband_find_the_same_best_with_the_same_losses(capsys, space):
    original, _ = search(capsys, space, "none")
    for strategy in ("knn", "random", "batch-size"):
        packed, progress = search(capsys, space, strategy, "--memory-limit", "12Mi")
        assert packed["best"] == original["best"]
        assert [r["losses"] for r in packed["rungs"]] == [r["losses"] for r in original["rungs"]]
        assert "bracket s=2 rung 0: 9 trials x r=1" in progress
    # every pack fits the 12Mi limit: a Momentum trial's weights, gradients and buffer
    # alone are 1.7Mi, 2.2Mi with the headroom, so at most 5 trials
    assert max(len(p) for r in packed["rungs"] for p in r["packs"]) <= 5
    assert [len(r["packs"]) for r in original["rungs"]] == [r["n"] for r in original["rungs"]]
    assert (
        original["trial_steps"] == packed["trial_steps"] == 2 * (9 + 3 * 2 + 6 + 5 * 3 + 6 + 3 * 9)
    )


def test_successive_halving_packed_changes_nothing_but_time(capsys, space):
    sha = ("--algorithm", "successive-halving", "--configurations", "12")
    original, _ = search(capsys, space, "none", *sha)
    packed, progress = search(capsys, space, "knn", "--memory-limit", "12Mi", *sha)
    assert packed["algorithm"] == "successive-halving" and packed["configurations"] == 12
    assert [(r["bracket"], r["n"], r["r"]) for r in packed["rungs"]] == [
        (2, 12, 1),
        (2, 4, 3),
        (2, 1, 9),
    ]
    assert [r["losses"] for r in packed["rungs"]] == [r["losses"] for r in original["rungs"]]
    assert packed["best"] == original["best"]
    # resuming: 12 trials x 1 unit, 4 more x 2, 1 more x 6, at 2 steps per unit
    assert original["trial_steps"] == packed["trial_steps"] == 2 * (12 + 4 * 2 + 6)
    assert "bracket s=2 rung 0: 12 trials x r=1" in progress


def test_a_search_keeps_its_study_in_the_store_as_the_tokens_or_the_hosts(
    capsys, space, tmp_path, monkeypatch
):
    from rightsize.service.store import Store

    database = tmp_path / "store.db"
    store = Store(str(database))
    alice = store.create_token("alice")
    monkeypatch.delenv("RIGHTSIZE_TOKEN", raising=False)
    # a token the store does not know: one line, exit 2, before anything trains
    code, out, err = run(capsys, "tune", "--space", str(space), "--database", str(database),
                         "--token", "rs_not-a-token")  # fmt: skip
    assert_one_line_error(code, err, "--token: not a token of the store")
    assert "trial" not in err and out == ""
    mine, _ = search(capsys, space, "knn", "--database", str(database), "--token", alice,
                     "--name", "alices")  # fmt: skip
    assert mine["stored"]["owner"] == "token" and mine["stored"]["name"] == "alices"
    monkeypatch.setenv("RIGHTSIZE_TOKEN", alice)  # the quick-start's variable does the same
    from_env, _ = search(capsys, space, "knn", "--database", str(database))
    assert from_env["stored"]["owner"] == "token"
    monkeypatch.delenv("RIGHTSIZE_TOKEN")
    hosts, _ = search(capsys, space, "knn", "--database", str(database))
    assert hosts["stored"]["owner"] == "host" and hosts["stored"]["name"] == "mlp3-space-seed4"
    not_kept, _ = search(capsys, space, "knn", "--database", str(database), "--no-store")
    assert "stored" not in not_kept
    owner = store.owner(alice)
    kept = store.studies(owner)
    assert [(s.name, s.host) for s in kept] == [
        ("alices", False), ("mlp3-space-seed4", False), ("mlp3-space-seed4", True)]  # fmt: skip
    assert store.study(kept[0].id, owner).report["best"] == mine["best"]
    bob = store.owner(store.create_token("bob"))
    assert [s.name for s in store.studies(bob)] == ["mlp3-space-seed4"]  # the host's only
    store.close()


def test_human_report_names_the_best_and_each_rungs_packs(capsys, space):
    code, out, _ = run(
        capsys, "tune", "--space", str(space), "--max-resource", "3", "--steps-per-unit", "1",
        "--threads", "1", "--allocator", "default", "--quiet",
    )  # fmt: skip
    assert code == 0
    assert "best:  batch_size=" in out and "validation loss" in out and "wall time" in out
    assert "pack groups per rung" in out and "s=1 rung 0: [" in out


@pytest.mark.parametrize("backward", ["direct", "autograd"])
def test_ragged_packs_across_concurrent_brackets_change_nothing_but_time(capsys, space, backward):
    original, _ = search(capsys, space, "none")
    packed, progress = search(
        capsys, space, "knn", "--memory-limit", "12Mi", "--batch-mode", "ragged",
        "--concurrent-brackets", "--backward", backward,
    )  # fmt: skip
    assert packed["best"] == original["best"] and packed["backward"] == backward
    assert [r["losses"] for r in packed["rungs"]] == [r["losses"] for r in original["rungs"]]
    assert "phase 0 to r=1: 17 trials of 3 brackets" in progress
    assert packed["trial_steps"] == original["trial_steps"]


def test_two_worker_processes_change_nothing_but_time(capsys, space):
    # real worker processes; each pack gets half the memory limit
    original, _ = search(capsys, space, "none")
    packed, progress = search(
        capsys, space, "knn", "--memory-limit", "24Mi", "--batch-mode", "ragged",
        "--concurrent-brackets", "--workers", "2",
    )  # fmt: skip
    assert packed["best"] == original["best"] and packed["workers"] == 2
    assert [r["losses"] for r in packed["rungs"]] == [r["losses"] for r in original["rungs"]]
    assert packed["memory_capacity_bytes"] == 12 * 2**20  # as above: at most 5 trials
    assert max(len(p) for r in packed["rungs"] for p in r["packs"]) <= 5
