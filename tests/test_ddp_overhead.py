"""The DDP probe (real DDP steps in real process groups) and the overhead model built from it."""

from __future__ import annotations

import pytest

from rightsize.core.errors import ResourceError
from rightsize.perf.ddp_overhead import DdpOverheadModel
from rightsize.profiling.ddp_probe import DdpProbeRecord, DdpProbeSettings, probe_ddp

MS = 1e-3


def record(world, grad_bytes, compute_ms, overhead_ms):
    return DdpProbeRecord(world, grad_bytes, 1, compute_ms * MS, (compute_ms + overhead_ms) * MS)


@pytest.fixture
def model():
    # world 2: at 1 MB the overhead is 2 ms after 1 ms of compute and 4 ms after 11 ms;
    # at 3 MB, 6 ms and 8 ms
    return DdpOverheadModel([
        record(2, 2**20, 1, 2), record(2, 2**20, 11, 4),
        record(2, 3 * 2**20, 1, 6), record(2, 3 * 2**20, 11, 8),
    ], "this-host")  # fmt: skip


def test_overhead_is_linear_in_compute_time_then_in_bytes(model):
    assert model.overhead_s(2, 2**20, 6 * MS) == pytest.approx(3 * MS)  # halfway: 2 -> 4
    assert model.overhead_s(2, 2 * 2**20, 1 * MS) == pytest.approx(4 * MS)  # halfway: 2 -> 6
    assert model.overhead_s(2, 2 * 2**20, 6 * MS) == pytest.approx(5 * MS)  # both: 3 -> 7


def test_outside_the_probed_grid(model):
    assert model.overhead_s(2, 2**20, 0.1 * MS) == pytest.approx(2 * MS)  # compute held
    assert model.overhead_s(2, 2**20, 100 * MS) == pytest.approx(4 * MS)
    assert model.overhead_s(2, 1024, 1 * MS) == pytest.approx(2 * MS)  # latency-bound: held
    assert model.overhead_s(2, 6 * 2**20, 1 * MS) == pytest.approx(12 * MS)  # in proportion


def test_a_world_size_never_probed_names_the_probed_ones(model):
    with pytest.raises(ResourceError, match=r"measured world sizes \[2\], not 3"):
        model.overhead_s(3, 2**20, MS)
    assert model.covers("this-host", 2)
    assert not model.covers("this-host", 3) and not model.covers("other-host", 2)


def test_a_ddp_step_faster_than_the_plain_one_has_no_overhead():
    assert DdpProbeRecord(1, 4, 1, 2 * MS, 1.5 * MS).overhead_s == 0.0


def test_saved_and_loaded_unchanged(model, tmp_path):
    path = tmp_path / "ddp-probe.json"
    model.save(path)
    loaded = DdpOverheadModel.load(path)
    assert loaded.host == "this-host"
    assert loaded.overhead_s(2, 2 * 2**20, 6 * MS) == pytest.approx(5 * MS)
    (tmp_path / "other.json").write_text('{"kind": "learned"}')
    with pytest.raises(ResourceError, match="not a DDP probe file"):
        DdpOverheadModel.load(tmp_path / "other.json")
    (tmp_path / "list.json").write_text("[]")
    with pytest.raises(ResourceError, match="not a DDP probe file"):
        DdpOverheadModel.load(tmp_path / "list.json")
    (tmp_path / "cut.json").write_text('{"kind": "ddp-probe", "host": "h"}')
    with pytest.raises(ResourceError, match="damaged DDP probe file"):
        DdpOverheadModel.load(tmp_path / "cut.json")


def test_bad_settings_and_no_records_are_refused():
    with pytest.raises(ResourceError, match="world sizes"):
        DdpProbeSettings(world_sizes=(0,)).validate()
    with pytest.raises(ResourceError, match="steps and rounds"):
        DdpProbeSettings(steps=0).validate()
    with pytest.raises(ResourceError, match="needs probe records"):
        DdpOverheadModel([], "this-host")


def test_the_probe_times_real_ddp_steps(tmp_path):
    settings = DdpProbeSettings(
        world_sizes=(2,), grad_bytes=(2**20,), rows=(32,), warmup=1, steps=3, rounds=1
    )
    lines = []
    (point,) = probe_ddp(settings, tmp_path, lines.append)
    assert (point.world, point.grad_bytes, point.rows) == (2, 2**20, 32)
    assert point.compute_s > 0 and point.ddp_s > 0  # (which is larger is for a quiet machine)
    assert lines == ["DDP probe round 1/1: world size 2"]
