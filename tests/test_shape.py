import pytest

from rightsize.core.errors import ResourceError, SpecError, UnknownNameError
from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape, DTConfig, NodeRole

GI = 2**30


def test_resources_arithmetic_and_bounds():
    a = Resources(2, 4 * GI)
    b = Resources.parse("500m", "1Gi")
    assert a + b == Resources(2.5, 5 * GI)
    assert a - b == Resources(1.5, 3 * GI)
    assert a.scaled(1.5) == Resources(3, 6 * GI)
    assert b.fits_within(a) and not a.fits_within(b)
    assert a.clipped_to(Resources(1, 8 * GI)) == Resources(1, 4 * GI)
    with pytest.raises(ResourceError):
        b - a  # noqa: B018 - negative resources are an error
    assert Resources(0.1 + 0.2).cpu_cores == 0.3  # millicore rounding, no float drift


def test_nearchus_initial_dt_config_splits_r0_as_one_third_ps_two_thirds_workers():
    # NEARCHUS §IV: R0 = 15 vCPU as (1 PS, 2 workers) -> (1, 2, R0/3, 2R0/3)
    shape = ClusterShape.from_dt_config(DTConfig(1, 2, Resources(5), Resources(10)))
    assert [n.name for n in shape.nodes] == ["ps-0", "worker-0", "worker-1"]
    assert [n.resources.cpu_cores for n in shape.nodes] == [5, 5, 5]
    config = shape.dt_config()
    assert (config.n_ps, config.n_wk, config.r_ps.cpu_cores, config.r_wk.cpu_cores) == (1, 2, 5, 10)


def test_scale_up_adds_proportionally_to_each_node():
    # nodes hold 2, 4, 6 cpu (12 total); adding 6 cpu (R_up = 50%) gives 3, 6, 9
    shape = ClusterShape.from_counts(1, 0, Resources(2, GI), Resources())
    shape = shape.with_node_added(NodeRole.WORKER, Resources(4, GI))
    shape = shape.with_node_added(NodeRole.WORKER, Resources(6, 2 * GI))
    grown = shape.scaled_up(Resources(6, 4 * GI))
    assert [n.resources.cpu_cores for n in grown.nodes] == [3, 6, 9]
    assert [n.resources.memory_bytes for n in grown.nodes] == [2 * GI, 2 * GI, 4 * GI]
    assert grown.total() == shape.total() + Resources(6, 4 * GI)


def test_add_worker_then_redistribute_evenly_within_the_role():
    # NEARCHUS MU bottleneck: 2 workers x 6 cpu -> 3 workers sharing r_wk = 12 -> 4 each
    shape = ClusterShape.from_counts(1, 2, Resources(3), Resources(6))
    shape = shape.with_node_added(NodeRole.WORKER, Resources(0))
    even = shape.redistributed(NodeRole.WORKER)
    assert [n.resources.cpu_cores for n in even.workers] == [4, 4, 4]
    assert even.ps[0].resources.cpu_cores == 3
    assert even.role_total(NodeRole.WORKER).cpu_cores == 12


def test_node_names_are_stable_and_reuse_the_lowest_free_index():
    shape = ClusterShape.from_counts(1, 3, Resources(1), Resources(1))
    shape = shape.without_node("worker-1")
    assert [n.name for n in shape.workers] == ["worker-0", "worker-2"]
    shape = shape.with_node_added(NodeRole.WORKER, Resources(1))
    assert [n.name for n in shape.workers] == ["worker-0", "worker-2", "worker-1"]
    shape = shape.with_resources("worker-2", Resources(2))
    assert shape.node("worker-2").resources.cpu_cores == 2


def test_shape_errors_and_round_trip():
    shape = ClusterShape.from_counts(2, 1, Resources(1, GI), Resources(4, 2 * GI))
    assert ClusterShape.from_dict(shape.to_dict()) == shape
    assert shape.describe() == "2 ps (2 cpu) + 1 worker (4 cpu)"
    with pytest.raises(UnknownNameError, match="did you mean 'worker-0'"):
        shape.node("worker-O")
    with pytest.raises(SpecError):
        ClusterShape.from_counts(-1, 1, Resources(), Resources())
    with pytest.raises(ResourceError):
        ClusterShape().scaled_up(Resources(1))
