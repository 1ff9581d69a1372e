"""A starting node borrows the budget's idle CPU until it trains (runtime.allowance)."""

from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape
from rightsize.runtime.allowance import startup_resources

GI = 2**30


def test_starting_nodes_share_what_the_budget_leaves_idle():
    # issue 17's too-small start: 3 nodes at 0.2 on a 2-cpu budget, nothing running yet:
    # 1.4 idle cores, 0.467 more each
    shape = ClusterShape.from_counts(1, 2, Resources(0.2, GI), Resources(0.2, GI))
    boosted = startup_resources(shape.nodes, 0.0, Resources(2, 6 * GI), machine_cores=2)
    assert sorted(boosted) == ["ps-0", "worker-0", "worker-1"]
    assert all(abs(r.cpu_cores - (0.2 + 1.4 / 3)) <= 1e-3 for r in boosted.values())  # millicores
    assert all(r.memory_bytes == GI for r in boosted.values())  # memory is the node's own


def test_a_node_added_to_a_running_job_borrows_only_the_idle_rest():
    worker = ClusterShape.from_counts(1, 1, Resources(1), Resources(0.13)).workers
    (only,) = startup_resources(worker, 1.6, Resources(2), machine_cores=2).values()
    assert abs(only.cpu_cores - 0.4) < 1e-9  # 2 - 1.6 held = 0.4 for the newcomer
    assert startup_resources(worker, 1.87, Resources(2), machine_cores=2) == {}  # none idle
    # never more than the machine: a 16-cpu budget on a 2-core machine
    (capped,) = startup_resources(worker, 0.0, Resources(16), machine_cores=2).values()
    assert capped.cpu_cores == 2
