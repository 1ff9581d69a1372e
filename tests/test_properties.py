"""Invariants checked on many generated cases (hypothesis)."""

from hypothesis import given
from hypothesis import strategies as st

from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape, NodeRole
from rightsize.perf.compute import PiecewiseLinear
from rightsize.profiling.bmax import BmaxSearch, find_max_batch


@given(
    base=st.integers(1, 10_000),
    per_sample=st.integers(1, 5_000),
    limit=st.integers(1, 10_000_000),
    cap=st.integers(1, 5000),
)
def test_bmax_is_the_largest_fitting_batch_under_monotone_memory(base, per_sample, limit, cap):
    def measure(batch: int) -> int:
        return base + per_sample * batch

    if measure(1) > limit:
        return  # covered by the explicit error test
    result = find_max_batch(measure, limit, BmaxSearch(max_batch=cap, rel_tolerance=0))
    assert measure(result.bmax) <= limit and result.bmax <= cap
    if result.limited_by == "memory":
        assert measure(result.bmax + 1) > limit
    else:
        assert result.bmax == cap
    assert all(peak == measure(batch) for batch, peak in result.probes)


@given(
    cpus=st.lists(st.integers(1, 64_000), min_size=1, max_size=8),
    extra_millis=st.integers(0, 100_000),
)
def test_scale_up_adds_exactly_the_extra_and_keeps_proportions(cpus, extra_millis):
    shape = ClusterShape()
    for millis in cpus:
        shape = shape.with_node_added(NodeRole.WORKER, Resources(millis / 1000))
    extra = Resources(extra_millis / 1000)
    grown = shape.scaled_up(extra)
    total_before = shape.total().cpu_cores
    assert abs(grown.total().cpu_cores - (total_before + extra.cpu_cores)) <= 0.001 * len(cpus)
    for before, after in zip(shape.nodes, grown.nodes, strict=True):
        share = before.resources.cpu_cores / total_before
        assert (
            abs(after.resources.cpu_cores - before.resources.cpu_cores - share * extra.cpu_cores)
            <= 0.001
        )


@given(
    st.lists(
        st.tuples(st.integers(1, 4096), st.floats(1e-6, 100)),
        min_size=1,
        max_size=12,
        unique_by=lambda p: p[0],
    )
)
def test_piecewise_linear_passes_through_every_point(points):
    f = PiecewiseLinear.through(points)
    for x, y in points:
        assert abs(f(x) - y) <= 1e-9 * max(1.0, abs(y))
