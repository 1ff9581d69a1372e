"""The pack gate: it times packs against their trials alone, splits the slower ones, changes no result."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from rightsize.cli.main import main
from rightsize.core.errors import SpecError
from rightsize.packing.optimizers import OptimizerSpec
from rightsize.packing.probe import PackGate, PackProbe, ProbeSettings, size_class
from rightsize.packing.runner import TuneSettings, prepare_search, run_search
from rightsize.packing.space import load_space
from rightsize.packing.trial import TrialSpec
from rightsize.workloads.registry import WorkloadRegistry

# a small space and search, shared with tests/test_integrations_optuna.py
SPACE = """\
batch_size: {from: 16, to: 32, step: 8}
optimizer: [adam, momentum]
lr: [0.01, 0.1]
activation: [relu, tanh]
"""
SETTINGS = TuneSettings(
    workload="mlp3", dataset="digits", max_resource=9, eta=3, seed=4, steps_per_unit=2,
    memory_limit_bytes=12 * 2**20,
)  # fmt: skip
#: No pack saves 99% of its trials' time, and none costs 99 times as much: these two
#: thresholds decide every measurement whatever the timings, so the tests are not timing tests.
SPLIT_ALL, KEEP_ALL = 0.99, -0.99


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def space(tmp_path_factory):
    path = tmp_path_factory.mktemp("probe") / "space.yaml"
    path.write_text(SPACE)
    return load_space(path, ["activation"])


def searched(space, **changes):
    search = prepare_search(replace(SETTINGS, **changes), space, WorkloadRegistry())
    return search, run_search(search)


def losses(result):
    return [r.losses for r in result.rungs]


def test_a_gate_that_splits_every_pack_changes_no_loss_and_trains_each_trial_alone(space):
    _, original = searched(space, packopt=replace(SETTINGS.packopt, strategy="none"))
    ungated, plain = searched(space, probe=ProbeSettings(enabled=False))
    gated, split = searched(space, probe=ProbeSettings(min_gain=SPLIT_ALL))
    assert losses(split) == losses(plain) == losses(original)  # bit for bit
    assert split.best.trial_id == original.best.trial_id
    assert any(len(g) > 1 for r in plain.rungs for g in r.groups)  # there were packs to split
    assert all(len(g) == 1 for r in split.rungs for g in r.groups)
    assert ungated.gate is None and gated.executor.alone == "fused"  # alone = plain torch.optim
    assert gated.gate.probes and not any(p.packed for p in gated.gate.probes)
    assert gated.executor.trial_steps == ungated.executor.trial_steps


def test_a_gate_that_keeps_every_pack_trains_pack_opts_groups(space):
    _, plain = searched(space, probe=ProbeSettings(enabled=False))
    gated, kept = searched(space, probe=ProbeSettings(min_gain=KEEP_ALL))
    assert [r.groups for r in kept.rungs] == [r.groups for r in plain.rungs]
    assert losses(kept) == losses(plain)
    assert all(p.packed for p in gated.gate.probes)
    # one measurement per kind (size class, one model or several), however many packs
    kinds = {(size_class(len(p.trial_ids)), len(p.architectures) == 1) for p in gated.gate.probes}
    packs = sum(len(g) > 1 for r in kept.rungs for g in r.groups)
    assert len(gated.gate.probes) == len(kinds) <= packs


def test_measurements_are_real_step_times_and_reused(space):
    search = prepare_search(replace(SETTINGS, probe=ProbeSettings(min_gain=SPLIT_ALL)), space,
                            WorkloadRegistry())  # fmt: skip
    gate: PackGate = search.gate
    trials = [
        TrialSpec(f"t{i}", 16 + 8 * (i % 3), OptimizerSpec("adam", 0.01), (("activation", "relu"),))
        for i in range(4)
    ]
    rng_before = torch.get_rng_state()
    assert gate.admit([trials]) == [[t] for t in trials]  # 4 split into 2+2, then into ones
    assert torch.equal(torch.get_rng_state(), rng_before)  # trials draw their own numbers
    assert [len(p.trial_ids) for p in gate.probes] == [4, 2]
    for probe in gate.probes:
        assert probe.pack_s > 0 and probe.alone_s > 0 and gate.seconds > probe.pack_s
    spent = gate.seconds
    assert gate.admit([trials[1:]]) == [[t] for t in trials[1:]]  # 3 is of 4's size class
    assert len(gate.probes) == 2 and gate.seconds == spent  # nothing measured again


def test_probe_arithmetic_and_settings():
    probe = PackProbe(("a", "b"), ((),), (16, 32), pack_s=0.006, alone_s=0.010, min_gain=0.05)
    assert probe.gain == pytest.approx(0.4) and probe.packed
    assert not replace(probe, pack_s=0.0099).packed  # 1% saved is below the 5% asked
    assert replace(probe, pack_s=0.02).gain == pytest.approx(-1.0)
    assert probe.as_dict()["alone_ms_per_step"] == pytest.approx(10.0)
    assert [size_class(n) for n in (1, 2, 3, 4, 5, 8, 9)] == [1, 2, 4, 4, 8, 8, 16]
    with pytest.raises(SpecError, match="timed steps >= 1"):
        ProbeSettings(timed_steps=0)
    with pytest.raises(SpecError, match="min gain"):
        ProbeSettings(min_gain=1.0)


def test_cli_shows_the_gates_decisions_and_can_turn_it_off(capsys, tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text(SPACE)
    common = ["tune", "--space", str(path), "--max-resource", "3", "--steps-per-unit", "1",
              "--threads", "1", "--allocator", "default", "--memory-limit", "12Mi"]  # fmt: skip
    assert main([*common, "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "pack gate: " in out and "kinds of pack timed" in out and "ms/step" in out
    assert main([*common, "--json", "--no-pack-gate"]) == 0
    assert json.loads(capsys.readouterr().out)["pack_gate"] is None
    assert main([*common, "--json"]) == 0
    gate = json.loads(capsys.readouterr().out)["pack_gate"]
    assert gate["probes"] and {"pack_ms_per_step", "gain", "packed"} <= set(gate["probes"][0])
