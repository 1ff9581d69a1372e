import pytest

from rightsize.core.errors import ResourceError
from rightsize.profiling.bmax import BmaxSearch, find_max_batch

MB = 2**20


def linear_memory(base_mb: float, per_sample_mb: float):
    calls = []

    def measure(batch: int) -> int:
        calls.append(batch)
        return int((base_mb + per_sample_mb * batch) * MB)

    return measure, calls


def test_exact_bmax_on_a_linear_memory_curve():
    # 100 MB + 3 MB/sample under 1000 MB -> largest fitting batch is floor(900/3) = 300
    measure, calls = linear_memory(100, 3)
    result = find_max_batch(measure, 1000 * MB, BmaxSearch(rel_tolerance=0))
    assert result.bmax == 300 and result.limited_by == "memory"
    assert calls[:9] == [1, 2, 4, 8, 16, 32, 64, 128, 256]  # doubling; 512 is skipped (see below)
    assert all(peak <= 1000 * MB for batch, peak in result.probes if batch <= 300)


def test_relative_tolerance_stops_early_but_never_overshoots():
    measure, _ = linear_memory(100, 3)
    result = find_max_batch(measure, 1000 * MB, BmaxSearch(rel_tolerance=1 / 16))
    assert 300 - 300 / 16 <= result.bmax <= 300


def test_cap_limits_the_search():
    measure, calls = linear_memory(1, 0.001)
    result = find_max_batch(measure, 1000 * MB, BmaxSearch(max_batch=100))
    assert result.bmax == 100 and result.limited_by == "cap"
    assert max(calls) == 100


def test_batches_far_beyond_the_limit_are_not_run():
    # 512 extrapolates to 100 + 3*512 = 1636 MB > 1.5 x 1000 MB: judged without running it
    measure, calls = linear_memory(100, 3)
    result = find_max_batch(measure, 1000 * MB, BmaxSearch(rel_tolerance=0, skip_factor=1.5))
    assert 512 not in calls and 512 in result.skipped
    assert result.bmax == 300


def test_a_limit_below_one_sample_is_a_clear_error():
    measure, _ = linear_memory(100, 3)
    with pytest.raises(ResourceError, match="below a training step at batch 1 .needs 103Mi"):
        find_max_batch(measure, 50 * MB)


def test_min_batch_two_starts_the_search_at_two():
    measure, calls = linear_memory(100, 3)
    result = find_max_batch(measure, 1000 * MB, BmaxSearch(rel_tolerance=0), min_batch=2)
    assert calls[0] == 2 and result.bmax == 300


def test_bad_settings():
    with pytest.raises(ResourceError):
        BmaxSearch(max_batch=0)
    with pytest.raises(ResourceError):
        BmaxSearch(rel_tolerance=1.5)


def test_a_probe_stopped_at_the_bound_does_not_fit_and_is_recorded():
    # the profiler's child process answers None when the kernel stopped it at the bound
    measure, _ = linear_memory(100, 3)

    def bounded(batch: int) -> int | None:
        peak = measure(batch)
        return None if peak > 1000 * MB else peak

    result = find_max_batch(bounded, 1000 * MB, BmaxSearch(rel_tolerance=0))
    assert result.bmax == 300 and result.limited_by == "memory"
    assert result.stopped and all(batch > 300 for batch in result.stopped)
    assert all(batch <= 300 for batch, _ in result.probes)  # only measured peaks are kept


def test_a_step_time_bound_stops_the_doubling_where_the_time_line_crosses_it():
    # 0.1 s + 10 ms/sample: a 2 s bound is crossed at batch 190; memory would allow 300
    measure, _ = linear_memory(100, 3)
    timed = []

    def step_time(batch: int) -> float:
        timed.append(batch)
        return 0.1 + 0.01 * batch

    search = BmaxSearch(rel_tolerance=0, max_step_s=2.0)
    result = find_max_batch(measure, 1000 * MB, search, step_time=step_time)
    assert result.bmax == 190 and result.limited_by == "time"
    # only batches known to fit are timed; the one over the bound twice (the faster counts)
    assert timed == [1, 2, 4, 8, 16, 32, 64, 128, 256, 256]
    assert max(batch for batch, _ in result.probes) == 256


def test_the_time_bound_also_limits_bisection_by_its_line():
    # memory stops the doubling at 512 (judged by its line, 1636 MB); between 256 and 512
    # the 2.905 s bound is crossed after 280 (0.1 + 0.01 * 280), before memory's 300; bisection
    # uses the time line through the timed steps instead of timing more
    measure, _ = linear_memory(100, 3)
    timed = []

    def step_time(batch: int) -> float:
        timed.append(batch)
        return 0.1 + 0.01 * batch

    search = BmaxSearch(rel_tolerance=0, max_step_s=2.905)
    result = find_max_batch(measure, 1000 * MB, search, step_time=step_time)
    assert result.bmax == 280 and result.limited_by == "time"
    assert max(timed) == 256 and 512 in result.skipped


def test_a_time_bound_needs_a_timer_and_must_be_positive():
    measure, _ = linear_memory(100, 3)
    with pytest.raises(ValueError, match="step_time"):
        find_max_batch(measure, 1000 * MB, BmaxSearch(max_step_s=1.0))
    with pytest.raises(ResourceError, match="max_step_s"):
        BmaxSearch(max_step_s=0)


def test_a_step_over_the_time_bound_is_timed_again_and_the_faster_counts():
    # the first step at 16 pays one-off work (5 s); timed again it takes 0.26 s, under 1 s
    measure, _ = linear_memory(100, 3)
    first = {16}
    timed = []

    def step_time(batch: int) -> float:
        timed.append(batch)
        if batch in first:
            first.discard(batch)
            return 5.0
        return 0.1 + 0.01 * batch

    result = find_max_batch(measure, 1000 * MB, BmaxSearch(max_step_s=1.0), step_time=step_time)
    assert timed.count(16) == 2 and dict(result.step_times)[16] == pytest.approx(0.26)
    assert result.limited_by == "time" and result.bmax == 90  # 64 (0.74 s) to 128 (1.38 s)


def test_the_time_bound_never_stops_the_search_below_its_floor():
    # a busy host: 4 s a step even at batch 1, over a 3 s bound; the floor keeps B_max at 8
    # (Srift's batches 1, 3, 5, 8), and past it the time line still stops the doubling
    measure, _ = linear_memory(100, 3)

    timed = []

    def step_time(batch: int) -> float:
        timed.append(batch)
        return 4.0 + 0.5 * batch

    floor = BmaxSearch(rel_tolerance=0, max_step_s=3.0, time_floor=8)
    result = find_max_batch(measure, 1000 * MB, floor, step_time=step_time)
    assert result.bmax == 8 and result.limited_by == "time"
    assert timed == [1, 2, 4, 8, 16, 16]  # timed again only where it could stop the search
    assert find_max_batch(measure, 1000 * MB, BmaxSearch(rel_tolerance=0, max_step_s=3.0),
                          step_time=step_time).bmax == 1  # fmt: skip
    # a floor under a fast step changes nothing: 0.1 s + 10 ms/sample crosses 2 s at 190
    fast = BmaxSearch(rel_tolerance=0, max_step_s=2.0, time_floor=8)
    assert find_max_batch(measure, 1000 * MB, fast,
                          step_time=lambda b: 0.1 + 0.01 * b).bmax == 190  # fmt: skip
    with pytest.raises(ResourceError, match="time_floor"):
        BmaxSearch(time_floor=0)
