"""FC2's recommenders on the paper's Table 1-2 prices; roofline scaling; the learned comm model."""

import math
from dataclasses import replace

import numpy as np
import pytest

from profile_factory import linear_profile
from rightsize.core.catalog import load_catalog
from rightsize.core.errors import ResourceError, SpecError
from rightsize.perf.comm import AnalyticCommModel, Link
from rightsize.perf.comm_learned import LearnedCommModel
from rightsize.perf.compute import ComputeModel
from rightsize.perf.roofline import DeviceRates, RooflineCompute, roofline_s
from rightsize.planning.fc2 import Fc2Planner, Fc2Request, choose_ps, worker_count
from rightsize.planning.options import make_option
from rightsize.profiling.comm_probe import ProbeRecord


@pytest.fixture(scope="module")
def fc2():
    return load_catalog("fc2-2018")


def test_fc2_worker_counts_with_the_papers_prices(fc2):
    # FC2 §5.2: C = $2/h, PS m4.large at $0.125/h
    ps, request = fc2.get("m4.large"), Fc2Request(128, 1000, budget_per_hour=2.0)
    # Cost-Opt picks the cheapest worker of Table 2, c4.xlarge at $0.231: (2 - 0.125) / 0.231 = 8.1 -> 8
    assert worker_count(request, ps, fc2.get("c4.xlarge")) == 8
    # Time-Opt picks the most expensive, c4.8xlarge at $1.848: (2 - 0.125) / 1.848 = 1.01 -> 1
    assert worker_count(request, ps, fc2.get("c4.8xlarge")) == 1
    assert worker_count(Fc2Request(128, 1000, max_workers=6), ps, fc2.get("c4.xlarge")) == 6
    # FC2 §5.2.1: the PS with the largest network capacity (m4.10xlarge, 10 Gbps)
    table1 = [fc2.get(n) for n in ("m4.large", "m4.2xlarge", "m4.10xlarge")]
    assert choose_ps(table1).name == "m4.10xlarge"
    assert choose_ps(table1, budget_per_hour=2.0).name == "m4.2xlarge"  # m4.10xlarge costs $2.50/h
    with pytest.raises(ResourceError, match="either an hourly budget"):
        Fc2Request(128, 1000)


def test_fc2_recommenders_pick_by_price_and_scala_opt_by_bandwidth(fc2):
    profile = linear_profile(per_sample_s=0.002, fixed_s=0.01, param_bytes=(4_000_000,))
    names = ["m4.xlarge", "t2.xlarge", "c4.xlarge", "c4.8xlarge"]
    workers = [make_option([profile], fc2.get(n), 16) for n in names]
    planner = Fc2Planner(
        profile, workers, fc2.get("m4.large"), Fc2Request(64, 1000, budget_per_hour=2.0)
    )
    assert str(planner.recommend("cost-opt").config) == "8×c4.xlarge@64 + 1×m4.large@ps"
    assert str(planner.recommend("time-opt").config) == "1×c4.8xlarge@64 + 1×m4.large@ps"
    # Scala-Opt: n_t = min(B_ps * p / b_t, (C - c_ps) / c_t) for each type, smallest wins
    counts = {o.name: planner.scala_count(o) for o in workers}
    for option in workers:
        by_network = math.floor(0.5e9 / 8 * 0.95 / planner.bandwidth_per_worker(option))
        assert counts[option.name] == min(
            by_network, worker_count(planner.request, planner.ps, option.instance)
        )
    scala = planner.recommend("scala-opt")
    assert scala.config.slots[0].count == min(counts.values())
    manual = planner.recommend("scala-opt-m", "t2.xlarge")
    assert (
        manual.config.slots[0].instance == "t2.xlarge"
        and manual.config.slots[0].count == counts["t2.xlarge"]
    )
    assert scala.models["ps"].startswith("dlrover-eq1")
    with pytest.raises(ResourceError, match="scala-opt-m needs a worker type"):
        planner.recommend("scala-opt-m", "p9.huge")
    poor = Fc2Planner(
        profile, workers, fc2.get("m4.large"), Fc2Request(64, 10, budget_per_hour=0.2)
    )
    with pytest.raises(ResourceError, match="not one c4.xlarge worker"):
        poor.recommend("cost-opt")


def test_roofline_by_hand():
    # layer0: 1e9 FLOP and 1e5 output bytes per sample, 4e7 param bytes; on 1 TFLOP/s, 100 GB/s at B=1:
    # compute 1e-3 s vs memory (4e7 + 2e5) / 1e11 = 4.02e-4 s -> 1e-3 s (compute-bound)
    profile = linear_profile(param_bytes=(40_000_000,))
    source = DeviceRates("src", 1e12, 1e11, 2**34)
    rest = max(1e8 / 1e12, 2 * 5e5 / 1e11)  # FLOPs outside layers vs saved activations
    assert roofline_s(profile, source, 1, "forward") == pytest.approx(1e-3 + rest)
    # a device twice as fast in both rates halves every term, so the ratio method halves the time
    double = DeviceRates("dbl", 2e12, 2e11, 2**34)
    scaled = RooflineCompute(profile, ComputeModel.from_profile(profile), source, double)
    measured = ComputeModel.from_profile(profile).predict(100)
    assert scaled.predict(100).total_s == pytest.approx(measured.total_s / 2)
    absolute = RooflineCompute(
        profile, ComputeModel.from_profile(profile), source, double, "absolute", 0.5
    )
    assert absolute.predict(1).forward_s == pytest.approx(
        roofline_s(profile, double, 1, "forward") / 0.5
    )
    with pytest.raises(SpecError, match="unknown roofline method"):
        RooflineCompute(profile, ComputeModel.from_profile(profile), source, double, "magic")


def test_profiles_without_peaks_cannot_be_scaled():
    profile = linear_profile()
    old = profile.model_copy(
        update={"device": profile.device.model_copy(update={"peak_flops_per_s": None})}
    )
    with pytest.raises(SpecError, match="re-run rightsize profile"):
        DeviceRates.of_profile(old)


def synthetic_records(rounds: int = 3, seed: int = 0) -> list[ProbeRecord]:
    """Probe-like records from a ring model with 5% noise: what a probe of one host looks like."""
    rng, model, link = np.random.default_rng(seed), AnalyticCommModel(2e-5, 0.6), Link("box", 10.0)
    records = []
    for _ in range(rounds):
        for world in (2, 3, 4):
            for k in range(2, 29):
                for concurrent in (1, 2):
                    bus = (
                        model.bus_bandwidth(2**k, world, link) / concurrent * rng.lognormal(0, 0.05)
                    )
                    seconds = 2 * 2**k * (world - 1) / (world * bus)
                    records.append(ProbeRecord("box", 2, 24.0, 10.0, "", 9001, "gloo", 2**k, world,
                                               concurrent, seconds, bus))  # fmt: skip
    return records


def test_learned_comm_model_fits_two_halves_and_round_trips(tmp_path):
    records = synthetic_records(rounds=1)
    model = LearnedCommModel.fit(records)
    assert model.mtu_bytes == 9001
    assert set(model.small.cv_mape) == {"squared-error", "huber", "log-squared-error"}
    actual = np.array([r.bus_bytes_per_s for r in records])
    assert np.mean(np.abs(model.predict_records(records) - actual) / actual) < 0.15
    assert (model.predict_records(records) > 0).all()
    loaded = LearnedCommModel.load(model.save(tmp_path / "m.json"))
    box = Link("box", 10.0, 2, 24.0)
    assert loaded.bus_bandwidth(2**20, 3, box) == pytest.approx(model.bus_bandwidth(2**20, 3, box))
    # hosts never probed get the analytic fallback, and plans are told so
    other = Link("elsewhere", 25.0)
    assert model.kind_for(box) == "learned" and model.kind_for(other) == "analytic"
    assert model.bus_bandwidth(2**20, 2, other) == AnalyticCommModel().bus_bandwidth(
        2**20, 2, other
    )


def test_bad_comm_model_files(tmp_path):
    (tmp_path / "x.json").write_text('{"schema": "nope"}')
    with pytest.raises(SpecError, match="not a rightsize comm model"):
        LearnedCommModel.load(tmp_path / "x.json")
    with pytest.raises(SpecError, match="cannot read comm model"):
        LearnedCommModel.load(tmp_path / "missing.json")
    with pytest.raises(SpecError, match="no probe records"):
        LearnedCommModel.fit([])


def exact_analytic_records(noise: float = 0.0) -> list[ProbeRecord]:
    """Records the default analytic model predicts exactly (``noise``: lognormal spread)."""
    rng, model, link = np.random.default_rng(1), AnalyticCommModel(), Link("box", 10.0, 2, 24.0)
    records = []
    for world in (2, 3, 4):
        for k in range(2, 29):
            bus = model.bus_bandwidth(2**k, world, link) * rng.lognormal(0, noise)
            seconds = 2 * 2**k * (world - 1) / (world * bus)
            records.append(ProbeRecord("box", 2, 24.0, 10.0, "", 9001, "gloo", 2**k, world, 1,
                                       seconds, bus))  # fmt: skip
    return records


def test_a_learned_model_worse_than_the_analytic_one_is_not_used_and_the_plan_says_so(tmp_path):
    from rightsize.cli.plan_cmd import comm_model

    # the probes follow the analytic model exactly: its error is 0, the trees' cannot be
    model = LearnedCommModel.fit(exact_analytic_records())
    assert model.analytic_mape == pytest.approx(0.0) and model.cv_mape > 0
    chosen, note = model.or_analytic()
    assert chosen is model.fallback and chosen.kind == "analytic"
    assert "not used" in note and f"{model.cv_mape:.1f}%" in note
    path = model.save(tmp_path / "m.json")
    notes: list[str] = []
    assert comm_model(str(path), notes).kind == "analytic" and notes == [note]
    # probes the analytic model misses by 5x (a slow loopback rated 10 Gbps): the trees win
    slow = [replace(r, bus_bytes_per_s=r.bus_bytes_per_s / 5) for r in exact_analytic_records(0.05)]
    learned = LearnedCommModel.fit(slow)
    assert learned.cv_mape < learned.analytic_mape and learned.or_analytic() == (learned, None)
    assert LearnedCommModel.load(learned.save(tmp_path / "l.json")).analytic_mape == pytest.approx(
        learned.analytic_mape
    )


def test_probes_without_a_rated_link_keep_the_learned_model():
    records = [replace(r, rated_gbps=0.0) for r in exact_analytic_records(0.05)]
    model = LearnedCommModel.fit(records)
    assert model.analytic_mape == float("inf") and model.or_analytic()[0] is model
