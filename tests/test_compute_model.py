import json

import pytest

from profile_factory import make_profile, sample
from rightsize.core.errors import SpecError
from rightsize.perf.compute import ComputeModel, PiecewiseLinear
from rightsize.profiling.profile import Profile, sample_batches, srift_sample_batches


def test_srift_sample_batches():
    assert srift_sample_batches(300) == [1, 100, 200, 300]
    assert srift_sample_batches(1040, min_batch=2) == [2, 347, 693, 1040]
    assert srift_sample_batches(2) == [1, 2]
    assert srift_sample_batches(1) == [1]


def test_dense_sampling_adds_powers_of_two():
    assert sample_batches("srift", 300) == [1, 100, 200, 300]
    assert sample_batches("dense", 300) == [1, 2, 4, 8, 16, 32, 64, 100, 128, 200, 256, 300]
    assert sample_batches("dense", 6, min_batch=2) == [2, 4, 6]
    with pytest.raises(SpecError, match="unknown sampling"):
        sample_batches("sparse", 10)


def test_piecewise_linear_by_hand():
    # points (1, 1.0) (100, 10.9) (200, 20.9) (300, 33.9):
    # segment 0: alpha = 9.9/99 = 0.1, beta = 0.9; segment 2: alpha = 13/100 = 0.13, beta = -5.1
    f = PiecewiseLinear.through([(300, 33.9), (1, 1.0), (200, 20.9), (100, 10.9)])
    assert f.xs == (1, 100, 200, 300) and f.segments == 3
    assert f.slope_intercept(0) == pytest.approx((0.1, 0.9))
    assert f.slope_intercept(2) == pytest.approx((0.13, -5.1))
    assert f(50) == pytest.approx(0.1 * 50 + 0.9)
    assert f(150) == pytest.approx(15.9)  # midway between 10.9 and 20.9
    assert f(400) == pytest.approx(0.13 * 400 - 5.1)  # extends the last segment
    assert f(100) == pytest.approx(10.9)  # exact at a knot
    assert PiecewiseLinear.through([(4, 2.0), (4, 4.0)])(10) == 3.0  # repeated x averaged, constant


def test_a_falling_last_segment_is_not_extended_below_zero():
    # VGG-19 measured on a loaded machine: 1.532 s at batch 43, 1.448 s at 64; extending
    # that segment gave a negative step time at batch 1024 (the planner crashed)
    f = PiecewiseLinear.through([(1, 0.2514), (21, 0.6859), (43, 1.532), (64, 1.4482)])
    assert f(50) == pytest.approx(1.532 + (1.4482 - 1.532) * 7 / 21)  # inside: the data
    secant = (1.4482 - 0.2514) / 63
    assert f(1024) == pytest.approx(1.4482 + secant * 960) and f(1024) > f(64)


def test_compute_model_from_a_profile_uses_srift_four_samples_only():
    samples = [sample(1, 0.010, 0.020), sample(50, 0.1, 0.2), sample(100, 0.2, 0.4),
               sample(200, 0.4, 0.8), sample(300, 0.75, 1.5)]  # fmt: skip
    profile = make_profile(samples)
    srift = ComputeModel.from_profile(profile, "srift")
    assert srift.total.xs == (1, 100, 200, 300)  # batch 50 ignored
    assert ComputeModel.from_profile(profile).method == "dense"  # auto: more than Srift's samples
    four = make_profile([s for s in samples if s.batch != 50])
    assert ComputeModel.from_profile(four).method == "srift"
    dense = ComputeModel.from_profile(profile, "dense")
    assert dense.total.xs == (1, 50, 100, 200, 300)
    prediction = srift.predict(250)
    assert prediction.forward_s == pytest.approx((0.4 + 0.75) / 2)
    assert prediction.backward_s == pytest.approx((0.8 + 1.5) / 2)
    assert prediction.total_s == pytest.approx((1.2 + 2.25) / 2)
    assert srift.optimizer_s == 0.001


def test_compute_model_errors():
    profile = make_profile([sample(1, 0.1, 0.2), sample(300, 1, 2)])
    with pytest.raises(SpecError, match="lacks Srift's sample batches"):
        ComputeModel.from_profile(profile, "srift")
    with pytest.raises(SpecError, match="unknown compute model"):
        ComputeModel.from_profile(profile, "cubic")
    with pytest.raises(SpecError, match="positive"):
        ComputeModel.from_profile(profile, "dense").predict(0)


def test_profile_round_trip(tmp_path):
    profile = make_profile([sample(1, 0.1, 0.2), sample(2, 0.15, 0.3)])
    path = profile.save(tmp_path / "sub" / "p.json")
    assert Profile.load(path) == profile
    assert json.loads(path.read_text())["schema"] == "rightsize.profile"
    assert not list((tmp_path / "sub").glob(".*tmp"))  # atomic write leaves no temp file
    assert path.stat().st_mode & 0o777 == 0o644  # readable by others, not mkstemp's 0o600
    assert profile.sample_nearest(3).batch == 2 and profile.param_bytes == 60


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "is not valid JSON"),
        ('{"schema": "other"}', "is not a rightsize profile"),
        ('{"schema": "rightsize.profile", "version": 99}', "profile version 99"),
        (
            '{"schema": "rightsize.profile", "version": 1, "workload": "x"}',
            "required field is missing",
        ),
    ],
)
def test_bad_profile_files(tmp_path, text, message):
    path = tmp_path / "p.json"
    path.write_text(text)
    with pytest.raises(SpecError, match=message):
        Profile.load(path)


def _falls(curve, xs) -> bool:
    values = [curve(x) for x in xs]
    return any(b < a for a, b in zip(values, values[1:], strict=False))


def test_the_monotone_fit_never_falls_where_the_old_one_did():
    # a linear truth (5 ms + 2 ms per sample, fwd 1/3 of it) timed on a busy host: ±30%
    # seeded noise on each sample; the old fit through the medians falls somewhere
    import random

    rng = random.Random(8)  # three falling segments
    samples = []
    for batch in (1, 2, 4, 8, 11, 16, 21, 32):
        truth = 0.005 + 0.002 * batch
        noisy = truth * (1 + rng.uniform(-0.3, 0.3))
        samples.append(sample(batch, noisy / 3, 2 * noisy / 3))
    profile = make_profile(samples)
    grid = [b / 4 for b in range(4, 4 * 64)]  # past B_max too
    old = ComputeModel.from_profile(profile, monotone=False)
    assert _falls(old.total, grid)  # the noise this test is about
    assert any(old.total.slope_intercept(i)[0] < 0 for i in range(old.total.segments))
    new = ComputeModel.from_profile(profile)
    assert new.monotone and not old.monotone
    for curve in (new.forward, new.backward, new.total):
        assert not _falls(curve, grid)
        assert all(curve.slope_intercept(i)[0] >= 0 for i in range(curve.segments))
    assert new.predict(64).total_s > new.predict(32).total_s  # still grows past B_max


def test_the_monotone_fit_pools_a_falling_run_into_its_mean():
    # the VGG-19 points above: 1.532 s at 43, 1.448 s at 64 become their mean at both
    f = PiecewiseLinear.through([(1, 0.2514), (21, 0.6859), (43, 1.532), (64, 1.4482)],
                                monotone=True)  # fmt: skip
    assert f.ys == pytest.approx((0.2514, 0.6859, 1.4901, 1.4901))
    assert f(1024) > f(64)  # the flat (pooled) end is extended with the secant, not flat
    same = [(1, 1.0), (2, 2.0), (4, 4.0)]  # already non-decreasing: unchanged
    assert PiecewiseLinear.through(same, monotone=True) == PiecewiseLinear(
        (1.0, 2.0, 4.0), (1.0, 2.0, 4.0), monotone=True
    )
