"""History feeds plans: measured speeds from the store, a launch's predicted time, and
`plan` reading what past runs measured per instance type."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from profile_factory import linear_profile
from rightsize.core.catalog import load_catalog
from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape
from rightsize.core.spec import parse_job_spec
from rightsize.planning.local import predict_launch
from rightsize.planning.measured import CorrectedCompute, HistoryFit, MeasuredSpeed, with_history
from rightsize.planning.options import make_option
from rightsize.runtime.state import LaunchRow, StateStore
from rightsize.service import history
from rightsize.service.models import JobPhase
from rightsize.service.runs import record_run
from rightsize.service.store import Store
from test_cli import assert_one_line_error, run

GI = 2**30
EXAMPLES = Path(__file__).parents[1] / "examples"
BATCH = 64


def allreduce_spec(name: str, tmp_path, **fields):
    data = {"name": name, "workload": "toy", "dataset": "synthetic-cifar", "batch_size": BATCH,
            "strategy": "allreduce", "steps": 1000, "budget": {"cpu": 2, "memory": "4Gi"},
            "initial_shape": {"workers": {"count": 2, "cpu": 1, "memory": "1Gi"}},
            "checkpoint": {"dir": str(tmp_path / name)}, **fields}  # fmt: skip
    return parse_job_spec(data)


def finished_run(store: Store, spec, speeds: list[float]) -> int:
    """A finished run whose one shape (2 workers x 1 core) measured ``speeds`` samples/s,
    one sample a second."""
    spec.checkpoint.dir.mkdir(parents=True, exist_ok=True)
    state = StateStore(spec.state_path)
    shape = ClusterShape.from_counts(0, 2, Resources(1, GI), Resources(1, GI))
    state.start_job(spec.name, {}, "id", 100.0, LaunchRow(shape, "launch", "job file", {}))
    for i, speed in enumerate(speeds, start=1):
        state.record_sample(float(i), {"time_s": float(i), "epoch": 0, "steps_done": i,
                                       "steps_total": 1000, "steps_per_s": speed / BATCH,
                                       "samples_per_s": speed, "loss": 1.0, "e_job": 1.0,
                                       "shape": "2x1", "nodes": []})  # fmt: skip
    state.close()
    return record_run(store, spec, "static", JobPhase.FINISHED, {"wall_time_s": len(speeds)})


@pytest.fixture
def store(tmp_path):
    store = Store(str(tmp_path / "runs.db"), instance_type="c5.large")
    yield store
    store.close()


def test_a_measured_speed_is_the_fastest_shape_after_it_settles(store, tmp_path):
    # the first SETTLE_SAMPLES of a shape are its warm-up, not its speed
    finished_run(store, allreduce_spec("a", tmp_path), [5000, 9000, 100, 110, 120, 130, 140])
    other = Store(str(tmp_path / "runs.db"))  # a host that declared no instance type
    finished_run(other, allreduce_spec("b", tmp_path), [200] * 5)
    other.close()
    [speed] = history.measured_speeds(store, "toy", "synthetic-cifar", {}, "allreduce")
    assert speed == MeasuredSpeed("a", "c5.large", 2 * BATCH, 120.0, 2.0)
    assert history.measured_speeds(store, "toy", "synthetic-cifar", {}, "ps") == []
    assert history.measured_speeds(store, "toy", "synthetic-cifar", {"width": 2}, "allreduce") == []


def test_history_scales_the_types_compute_to_what_was_measured():
    aws = load_catalog("aws")
    option = make_option([linear_profile()], aws.get("c5.xlarge"), 4)
    # measured on 2 of the c5.xlarge's 4 vCPUs: scaled to the whole VM
    speed = MeasuredSpeed("a", "c5.xlarge", 128, 100.0, 2.0)
    corrected = with_history(option, [speed])
    assert corrected.vm_compute(128).total_s == pytest.approx(128 / 200.0)
    before, after = option.vm_compute(512).total_s, corrected.vm_compute(512).total_s
    assert after / before == pytest.approx(corrected.compute.factor)  # the profile's shape kept
    assert "measured by a" in corrected.provenance and "fewer cores: a" in corrected.provenance
    assert with_history(option, [MeasuredSpeed("a", "m5.large", 128, 1.0, 2.0)]) is option
    # two runs that disagree: the median, and their spread as the interval
    two = with_history(option, [speed, MeasuredSpeed("b", "c5.xlarge", 128, 400.0, 4.0)])
    # whole-VM speeds 200 and 400 samples/s: factors f and f/2, median 3f/4, the
    # farther one at 2/3 of it
    assert two.log_spread == pytest.approx(math.log(3 / 2))
    assert two.vm_compute(128).total_s == pytest.approx(128 / 200.0 * 0.75)


def test_a_policy_launch_is_predicted_from_the_profile(tmp_path):
    data = {"name": "w", "workload": "wide-deep", "dataset": "synthetic-criteo",
            "dataset_size": 10000, "batch_size": 512, "epochs": 2,
            "budget": {"cpu": 2, "memory": "4Gi"}, "initial_shape": "auto",
            "checkpoint": {"dir": str(tmp_path)}}  # fmt: skip
    spec = parse_job_spec(data)
    one = ClusterShape.from_counts(1, 1, Resources(0.5, GI), Resources(0.5, GI))
    two = ClusterShape.from_counts(2, 2, Resources(0.5, GI), Resources(0.5, GI))
    first, second = predict_launch(spec, one), predict_launch(spec, two)
    assert first.time_s == pytest.approx(20000 / (first.steps_per_s * 512))
    assert first.core_h == pytest.approx(first.time_s * 1.0 / 3600)
    assert second.steps_per_s > first.steps_per_s  # two PS: twice the update capacity
    assert "wide-deep's profile" in first.source
    # other options: the parameters are counted, so a smaller model is predicted faster
    small = parse_job_spec({**data, "options": {"embed_dim": 4}})
    assert predict_launch(small, one).steps_per_s > first.steps_per_s
    user = parse_job_spec({**data, "workload": "mypkg.models:factory"})
    assert predict_launch(user, one) is None  # no profile ships for a user's own model


def test_a_submitted_model_is_counted_without_allocating_it(tmp_path, monkeypatch):
    # a fuzzed POST /jobs once asked for a model the registry allows (up to 1e10 parameters)
    # and the prediction built it for real in the service's process: 24 GB, OOM-killed
    from rightsize.planning.local import profiled_model
    from rightsize.workloads.registry import WorkloadRegistry
    from rightsize.workloads.workload import Workload

    data = {"name": "w", "workload": "wide-deep", "dataset": "synthetic-criteo",
            "dataset_size": 10000, "batch_size": 512, "epochs": 2,
            "options": {"embed_dim": 4, "hidden": [96, 48]},
            "budget": {"cpu": 2, "memory": "4Gi"}, "checkpoint": {"dir": str(tmp_path)}}  # fmt: skip
    spec = parse_job_spec(data)
    real = WorkloadRegistry().get("wide-deep", "synthetic-criteo", data["options"], 10000)
    expected = sum(p.numel() for p in real.make_model().parameters())

    def no_real_build(*args, **kwargs):
        raise AssertionError("the prediction built the model on a real device")

    monkeypatch.setattr(Workload, "make_model", no_real_build)
    model = profiled_model(spec)
    assert model is not None  # counted on the meta device
    assert model.param_bytes == pytest.approx(4 * expected, rel=1e-6)


def test_a_recorded_run_shows_its_predicted_time(store, tmp_path):
    data = {"name": "w", "workload": "wide-deep", "dataset": "synthetic-criteo",
            "dataset_size": 4096, "batch_size": 512, "epochs": 1,
            "budget": {"cpu": 2, "memory": "4Gi"},
            "initial_shape": {"ps": {"count": 1, "cpu": 1, "memory": "1Gi"},
                              "workers": {"count": 1, "cpu": 1, "memory": "1Gi"}},
            "checkpoint": {"dir": str(tmp_path / "w")}}  # fmt: skip
    spec = parse_job_spec(data)
    spec.checkpoint.dir.mkdir(parents=True)
    state = StateStore(spec.state_path)
    shape = ClusterShape.from_counts(1, 1, Resources(1, GI), Resources(1, GI))
    state.start_job("w", {}, "id", 100.0, LaunchRow(shape, "launch", "job file", {}))
    state.close()
    job_id = record_run(store, spec, "static", JobPhase.FINISHED, {"wall_time_s": 3.0})
    job = store.job_by_id(job_id)
    assert job.predicted_time_s == pytest.approx(predict_launch(spec, shape).time_s)
    assert job.instance_type == "c5.large" and "profile" in job.predicted_note


@pytest.mark.integration
def test_plan_uses_what_past_runs_measured(store, tmp_path, capsys):
    profile = str(linear_profile().save(tmp_path / "toy.json"))
    finished_run(store, allreduce_spec("a", tmp_path), [1000.0] * 6)
    args = ["plan", "--profile", profile, "--global-batch", "128", "--iterations", "100",
            "--instances", "c5.large:1,m5.large:1", "--database", str(tmp_path / "runs.db"),
            "--quiet", "--json"]  # fmt: skip
    code, out, _ = run(capsys, *args)
    plans = json.loads(out)
    measured = next(p for p in plans if p["counts"] == {"c5.large": 1})
    assert measured["seconds_per_iter"] == pytest.approx(128 / 1000.0, rel=0.02)
    assert "measured by a" in json.dumps(measured["models"])
    other = next(p for p in plans if p["counts"] == {"m5.large": 1})
    assert "measured by" not in json.dumps(other["models"])
    plain = json.loads(run(capsys, *args, "--no-history")[1])
    assert not any("measured by" in json.dumps(p["models"]) for p in plain)


def test_plan_with_a_missing_store_is_one_line(tmp_path, capsys):
    profile = str(linear_profile().save(tmp_path / "toy.json"))
    args = ["plan", "--profile", profile, "--global-batch", "128", "--iterations", "100",
            "--instances", "c5.large:1", "--database", str(tmp_path / "none.db")]
    assert_one_line_error(*run(capsys, *args)[::2], "no such store")
    assert not (tmp_path / "none.db").exists()


def test_a_bad_instance_type_is_one_line(tmp_path, capsys):
    # refused before anything trains or any store is written
    args = ["run", str(EXAMPLES / "wide-deep-ps.yaml"), "--instance-type", "c5.larg",
            "--database", str(tmp_path / "runs.db")]  # fmt: skip
    assert_one_line_error(*run(capsys, *args)[::2], "did you mean 'c5.large'")
    assert not (tmp_path / "runs.db").exists()


def test_runs_at_several_batches_are_interpolated_then_held_flat():
    aws = load_catalog("aws")
    option = make_option([linear_profile()], aws.get("c5.large"), 4)
    speeds = [MeasuredSpeed("a", "c5.large", 64, 400.0, 2.0),
              MeasuredSpeed("b", "c5.large", 256, 800.0, 2.0)]  # fmt: skip
    fitted = with_history(option, speeds)
    assert "interpolated over 2 batches" in fitted.provenance
    speed = lambda b: b / fitted.vm_compute(b).total_s  # noqa: E731
    assert speed(64) == pytest.approx(400.0) and speed(256) == pytest.approx(800.0)
    assert speed(128) == pytest.approx(600.0)  # halfway in log batch
    assert speed(1024) == pytest.approx(800.0)  # flat above what was measured
    profile_shape = option.vm_compute(16).total_s / option.vm_compute(64).total_s
    assert fitted.vm_compute(16).total_s == pytest.approx(64 / 400.0 * profile_shape)
    scaled = with_history(option, speeds, HistoryFit.SCALE)
    assert isinstance(scaled.compute, CorrectedCompute)
