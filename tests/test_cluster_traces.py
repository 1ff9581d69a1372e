"""Traces: NEARCHUS's synthetic trace, Pollux-format and generic CSV files, and their errors."""

from pathlib import Path

import pytest

from rightsize.cluster import traces
from rightsize.core.errors import SpecError, UnitError, UnknownNameError
from rightsize.core.resources import Resources

DATA = Path(__file__).parent / "data"


def test_the_pool_is_five_cnns_in_six_variants_of_epochs_and_budget():
    pool = traces.nearchus_pool()
    assert len(pool) == 30 == len({j.name for j in pool})
    assert {j.model for j in pool} == set(traces.NEARCHUS_CNNS)
    variants = {(j.samples_total, j.budget.cpu_cores) for j in pool if j.model == "resnet50"}
    assert variants == {(e * 50_000, c) for e in (100, 300) for c in (30, 60, 100)}
    assert all(j.budget.memory_bytes == 0 for j in pool)  # CPU budgets, as in NEARCHUS


def test_nearchus_trace_has_forty_poisson_arrivals_deterministic_by_seed():
    trace = traces.nearchus_trace(seed=7)
    times = [j.arrival_s for j in trace.jobs]
    assert len(times) == 40 and times[0] == 0 and times == sorted(times)
    # one job per hour on average: 39 gaps average an hour within a wide margin
    assert 0.5 * 3600 < times[-1] / 39 < 2.0 * 3600
    assert trace == traces.nearchus_trace(seed=7)
    assert trace != traces.nearchus_trace(seed=8)
    assert traces.load_trace("nearchus-40", seed=7) == trace


def test_pollux_trace_maps_replicas_to_five_vcpu_nodes():
    trace = traces.load_trace(str(DATA / "pollux_tiny.csv"))
    cifar, ncf, imagenet = trace.jobs
    assert (cifar.name, cifar.arrival_s, cifar.model) == ("cifar10-0", 107, "resnet18")
    assert cifar.budget == Resources(30)  # 6 replicas x 5 vCPU
    assert ncf.budget == Resources(15)  # 1 replica -> at least 3 nodes' worth
    assert cifar.samples_total == 50_000 * 100  # Pollux's 100 epochs of CIFAR-10
    assert imagenet.model == "resnet50-imagenet"
    half = traces.load_pollux(DATA / "pollux_tiny.csv", work_scale=0.5)
    assert half.jobs[0].samples_total == 50_000 * 50


def test_generic_csv_reads_units_gpus_and_defaults():
    trace = traces.load_trace(str(DATA / "schedule_tiny.csv"))
    first, second, third = trace.jobs
    assert (first.arrival_s, first.duration_s, first.budget) == (0, 3600, Resources(30))
    assert second.arrival_s == 600 and second.budget == Resources(25)  # 20 cpu + 1 GPU x 5
    assert second.model == "mobilenet" and third.model == "resnet50"  # default model
    assert third.arrival_s == 1200 and third.samples_total is None


@pytest.mark.parametrize(
    ("name", "error", "match"),
    [
        ("schedule_missing_column.csv", SpecError, "missing column.*duration"),
        ("schedule_negative_time.csv", SpecError, "arrival '-5' must not be negative"),
        ("pollux_negative_time.csv", SpecError, "line 2: time -1 must not be negative"),
    ],
)
def test_bad_trace_files_say_what_is_wrong(name, error, match):
    with pytest.raises(error, match=match):
        traces.load_trace(str(DATA / name))


def test_other_trace_errors(tmp_path):
    with pytest.raises(UnknownNameError, match="unknown trace"):
        traces.load_trace("nearchus-41")
    empty = tmp_path / "empty.csv"
    empty.write_text("arrival,duration,cpu\n")
    with pytest.raises(SpecError, match="has no jobs"):
        traces.load_trace(str(empty))
    bad_model = tmp_path / "model.csv"
    bad_model.write_text("arrival,duration,cpu,model\n0,1h,10,resnet5\n")
    with pytest.raises(UnknownNameError, match="did you mean 'resnet50'"):
        traces.load_trace(str(bad_model))
    bad_unit = tmp_path / "unit.csv"
    bad_unit.write_text("arrival,duration,cpu\n0,1 fortnight,10\n")
    with pytest.raises(UnitError, match="duration"):
        traces.load_trace(str(bad_unit))
    twice = tmp_path / "twice.csv"
    twice.write_text("name,arrival,duration,cpu\na,0,1h,10\na,5,1h,10\n")
    with pytest.raises(SpecError, match="'a' appears twice"):
        traces.load_trace(str(twice))
    app = tmp_path / "app.csv"
    app.write_text("name,time,application,num_replicas,batch_size\nx,0,cifar100,1,64\n")
    with pytest.raises(UnknownNameError, match="did you mean 'cifar10'"):
        traces.load_trace(str(app))


def test_the_real_pollux_sample_loads_if_present():
    real = Path("/work/shared/data/pollux_workload-1.csv")
    if not real.is_file():
        pytest.skip("the shared Pollux sample is not on this machine")
    trace = traces.load_trace(str(real))
    assert len(trace.jobs) == 160
