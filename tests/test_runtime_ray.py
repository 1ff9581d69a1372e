"""The Ray backend, for real: a Ray cluster of several nodes on this host, real jobs on it.

The cluster (``ray.cluster_utils.Cluster``: a head that only runs the driver, and
three Ray nodes, each a raylet with its own resources) is started once for the
module; each node of a job is a process under an actor on one of those Ray nodes,
in a cgroup of this host. The exactly-once check reads the final checkpoint's
update logs itself. Skips where Ray is not installed or its cluster cannot start.
"""

from __future__ import annotations

import pytest

from rightsize.core.errors import ResourceError
from rightsize.core.resources import Resources
from rightsize.core.shape import NodeRole
from rightsize.core.spec import Backend
from rightsize.runtime.backends.ray import NODE_LABEL
from rightsize.runtime.master import Master
from rightsize.scaling.api import Action
from rightsize.scaling.registry import make_policy
from test_runtime_jobs import Script, assert_exactly_once, job_spec, run_until

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")

pytestmark = pytest.mark.integration
MI, GI = 2**20, 2**30
DIGITS = 1797
#: Ray nodes of the test cluster: CPUs each (memory 3 GiB each). Job nodes of 0.6 CPU never
#: share a 1-CPU Ray node, so where each lands is forced: a job spans three Ray nodes, and a
#: node added later is the only one with room (the tests that move nodes add one).
RAY_NODES = (1, 1, 1)
SPREAD = {"ps": {"count": 1, "cpu": 0.6, "memory": "1Gi"},
          "workers": {"count": 2, "cpu": 0.6, "memory": "1Gi"}}  # fmt: skip


@pytest.fixture(scope="module")
def cluster():
    try:
        made = cluster_utils.Cluster(initialize_head=True, head_node_args={
            "num_cpus": 0, "include_dashboard": False, "object_store_memory": 80 * MI})  # fmt: skip
        for cpus in RAY_NODES:
            made.add_node(num_cpus=cpus, memory=3 * GI, object_store_memory=80 * MI)
        made.wait_for_nodes()
    except Exception as exc:  # noqa: BLE001 (any reason Ray cannot start here)
        pytest.skip(f"a Ray cluster cannot start here: {exc}")
    ray.init(address=made.address, log_to_driver=False, namespace="rightsize")
    yield made
    ray.shutdown()
    made.shutdown()


def ray_job(tmp_path, cluster, **fields):
    runtime = {"backend": "ray", "ray_address": cluster.address, **fields.pop("runtime", {})}
    fields = {"initial_shape": SPREAD, "budget": {"cpu": 3, "memory": "9Gi"}, **fields}
    return job_spec(tmp_path, runtime=runtime, **fields)


def remove_then_add() -> list:
    """A scripted policy's steps: worker-1 removed, then a worker of 0.6 cpu added (each a
    restart of an allreduce group)."""
    return [(Action.REMOVE_WORKER, lambda s: s.without_node("worker-1")),
            (Action.ADD_WORKER, lambda s: s.with_node_added(NodeRole.WORKER,
                                                             Resources(0.6, GI)))]  # fmt: skip


def add_spare_node(cluster) -> None:
    """One more 1-CPU Ray node: the only one with room for a node that must move."""
    cluster.add_node(num_cpus=1, memory=3 * GI, object_store_memory=80 * MI)
    cluster.wait_for_nodes()


def test_a_ps_job_spans_ray_nodes_and_trains_each_sample_once(tmp_path, cluster):
    # checkpoints at a URL every Ray node reaches (here a directory they share, file://)
    shared = f"file://{tmp_path}/shared"
    spec = ray_job(tmp_path, cluster, epochs=3, checkpoint={
        "dir": str(tmp_path / "ckpt"), "interval": "3s", "url": shared})  # fmt: skip
    assert spec.runtime.backend == Backend.RAY
    master = Master(spec, make_policy("static"))
    assert master.machine.cpu_cores >= sum(RAY_NODES)  # the cluster's, not this machine's
    assert master.keys is not None  # across hosts the job's sockets use CURVE by default
    report = master.run()
    placed = {p["node"]: p["ray_node"] for p in master.backend.placements()}
    assert set(placed) == {"ps-0", "worker-0", "worker-1"}
    assert len(set(placed.values())) == 3  # 0.6 CPU each: one per Ray node
    assert report["isolation"].startswith("ray+")
    assert_exactly_once(spec, DIGITS, 3)  # read from the files at the URL
    assert report["accounting"]["exactly_once"]
    assert list((tmp_path / "shared" / spec.name).glob("v*/ps-0.pt"))
    assert not list((tmp_path / "ckpt" / spec.name).glob("v*"))  # only state and logs there
    assert (tmp_path / "ckpt" / spec.name / "logs" / "ps-0.log").is_file()
    # each node's CPU and memory were read on its host, from its own cgroup
    for name in placed:
        usage = report["nodes"][name]
        assert usage["cpu_used_mean"] > 0 and usage["memory_peak"] > 50 * MI, name
        assert usage["cpu_allocated_mean"] == pytest.approx(0.6)
    assert not ray.util.placement_group_table() or all(
        g["state"] == "REMOVED" for g in ray.util.placement_group_table().values())  # fmt: skip


def test_resizing_stays_in_place_where_the_host_has_room_else_relaunches(tmp_path, cluster):
    spec = ray_job(tmp_path, cluster, epochs=1000)
    blockers = []
    master: Master | None = None

    def crowd_worker_1_host(shape):
        # a reservation of someone else's takes half of what is left on worker-1's Ray node,
        # so worker-1 cannot grow there: it moves to the one Ray node with room, a new one
        add_spare_node(cluster)
        ray_node = master.backend.nodes["worker-1"].ray_node
        blocker = ray.util.placement_group([{"CPU": 0.3}], strategy="STRICT_PACK",
                                           bundle_label_selector=[{NODE_LABEL: ray_node}])  # fmt: skip
        ray.get(blocker.ready(), timeout=30)
        blockers.append(blocker)
        return shape.with_resources("worker-1", Resources(0.9, 1024 * MI))

    steps = [
        (Action.RESHAPE, lambda s: s.with_resources("worker-0", Resources(0.3, 1024 * MI))),
        (Action.SCALE_UP, lambda s: s.with_resources("worker-0", Resources(0.9, 1024 * MI))),
        (Action.SCALE_UP, crowd_worker_1_host),
        (Action.ADD_WORKER, lambda s: s.with_node_added(NodeRole.WORKER, Resources(0.3, GI))),
        (Action.REMOVE_WORKER, lambda s: s.without_node("worker-2")),
    ]  # fmt: skip
    policy = Script(steps, every_s=1.0)
    master = Master(spec, policy)
    first = {}
    try:
        report = run_until(master, lambda: not policy.steps and policy.seen[-1].time_s
                           - policy.seen[-1].shape_since_s > 2)  # fmt: skip
    finally:
        for blocker in blockers:
            ray.util.remove_placement_group(blocker)
    for p in master.backend.placements():
        first.setdefault(p["node"], []).append(p["ray_node"])
    applied = [t for t in report["timeline"] if t["applied"]]
    assert [t["action"] for t in applied] == [
        "launch", "reshape", "scale_up", "scale_up", "add_worker", "remove_worker"]
    # worker-0 shrank and grew in place: one launch, the same process
    assert applied[1]["details"]["resized_in_place"] == ["worker-0"]
    assert applied[2]["details"]["resized_in_place"] == ["worker-0"]
    assert len(first["worker-0"]) == 1
    # worker-1 could not grow where it ran: relaunched on another Ray node
    assert applied[3]["details"]["relaunched_to_resize"] == ["worker-1"]
    assert len(first["worker-1"]) == 2 and first["worker-1"][0] != first["worker-1"][1]
    final = {n["name"]: n for n in report["final_shape"]["nodes"]}
    assert final["worker-1"]["cpu"] == pytest.approx(0.9)
    assert_exactly_once(spec, DIGITS, master.job.shards.epoch, partial=True)


def test_an_allreduce_group_meets_at_the_master_s_store_across_ray_nodes(tmp_path, cluster):
    # rank 0's host is not known before it lands: the group meets at a store the master
    # serves on its own address; a rank removed and added restarts the group from a checkpoint
    spec = ray_job(tmp_path, cluster, strategy="allreduce", epochs=60,
                   initial_shape={"workers": {"count": 2, "cpu": 0.6, "memory": "1Gi"}},
                   training={"optimizer": "sgd", "lr": 0.05, "momentum": 0.9})  # fmt: skip
    master = Master(spec, Script(remove_then_add(), every_s=2))
    report = master.run()
    assert [t["action"] for t in report["timeline"] if t["applied"]] == [
        "launch", "remove_worker", "add_worker"]
    first = {p["node"]: p["ray_node"] for p in master.backend.placements()[:2]}
    assert len(set(first.values())) == 2  # the group spanned two Ray nodes
    assert_exactly_once(spec, DIGITS, 60)


def test_a_torchrun_script_s_ranks_meet_across_ray_nodes_exactly_once(tmp_path, cluster):
    """A user's DDP script (the counting workload with an ElasticSampler) as ranks on Ray
    nodes: a rank removed, then one added (each a restart of the group from the script's
    own checkpoint); the counts its weights hold are every sample once per epoch."""
    from rightsize.runtime.chaos import COUNTS_FILE, script_counter_job, trained_counts

    _, spec = script_counter_job(tmp_path, epochs=6, step_sleep_s=0.02,
                                 restart_payback=False)  # the script below moves regardless
    spec = spec.model_copy(update={
        "runtime": spec.runtime.model_copy(update={"backend": Backend.RAY,
                                                   "ray_address": cluster.address}),
        "initial_shape": spec.initial_shape.model_copy(update={
            "workers": spec.initial_shape.workers.model_copy(update={"cpu": 0.6})}),
    })  # fmt: skip
    master = Master(spec, Script(remove_then_add(), every_s=3))
    report = master.run()
    assert [t["action"] for t in report["timeline"] if t["applied"]] == [
        "launch", "remove_worker", "add_worker"]
    placed = {p["ray_node"] for p in master.backend.placements()}
    assert len(placed) >= 2 and report["isolation"].startswith("ray+")
    counts = trained_counts(spec)
    assert (tmp_path / COUNTS_FILE).exists()
    assert all(c.min() == c.max() == 6 for c in counts.values())
    assert report["accounting"]["exactly_once"] and not report["accounting"]["padded"]


def test_the_service_s_scheduler_runs_a_ray_job_unchanged(tmp_path, cluster):
    # the service admits the job against its books (here: the Ray cluster's CPUs) and its
    # runner's master places the nodes on Ray; the store records the run as any other
    from rightsize.core.spec import parse_job_spec
    from rightsize.service.allocator import Allocator
    from rightsize.service.store import Store
    from test_service_jobs import job, wait_for

    store = Store(str(tmp_path / "store.db"))
    allocator = Allocator(store, Resources(sum(RAY_NODES), 9 * GI), tmp_path / "work",
                          poll_s=0.3)  # fmt: skip
    data = job("on-ray", 200, 1.2, runtime={"metric_interval": "1s", "shard_size": 128,
                                             "backend": "ray", "ray_address": cluster.address})
    allocator.start()
    try:
        submitted = allocator.submit(parse_job_spec(data), owner_id=None)
        wait_for(lambda: store.job_by_id(submitted.id).phase in ("finished", "failed"), 300)
    finally:
        allocator.stop()
    view = store.job_by_id(submitted.id)
    assert view.phase == "finished", view.error
    assert view.accounting["exactly_once"] is True
    assert store.report(submitted.id)["isolation"].startswith("ray+")
    store.close()


def test_a_node_no_ray_node_can_hold_is_refused_clearly(tmp_path, cluster):
    spec = ray_job(tmp_path, cluster, epochs=1, initial_shape={
        "ps": {"count": 1, "cpu": 0.5, "memory": "1Gi"},
        "workers": {"count": 1, "cpu": 0.5, "memory": "8Gi"}})  # fmt: skip
    master = Master(spec, make_policy("static"))
    with pytest.raises(ResourceError, match=r"node worker-0 asks for 0.5 CPU and 8Gi but no node "
                                            r"of the Ray cluster has both \(the largest: 1 CPU, 3Gi\)"):
        master.run()
    assert not master.backend  # refused before anything was launched


def test_a_lost_ray_node_s_nodes_are_relaunched_elsewhere_exactly_once(tmp_path, cluster):
    # the last test of the module: it kills one of the cluster's Ray nodes (its raylet and
    # everything under it), the one holding the parameter server
    spec = ray_job(tmp_path, cluster, epochs=6)
    if len([n for n in ray.nodes() if n["Alive"]]) - 1 < len(RAY_NODES) + 1:
        add_spare_node(cluster)  # room for the node that moves (the others hold one each)
    master: Master | None = None
    killed = []

    def kill_the_ps_host(shape):
        ray_node = master.backend.nodes["ps-0"].ray_node
        victim = next(n for n in cluster.list_all_nodes() if n.node_id == ray_node)
        cluster.remove_node(victim, allow_graceful=False)
        killed.append(ray_node)
        return shape  # no change: the runtime recovers on its own

    # the first tick comes soon: a fast machine ran the whole job before a 3 s tick (CI-like run)
    policy = Script([(Action.RESHAPE, kill_the_ps_host)], every_s=1.5)
    master = Master(spec, policy)
    report = master.run()
    moved = [p for p in master.backend.placements() if p["node"] == "ps-0"]
    assert killed and len(moved) == 2 and moved[1]["ray_node"] != killed[0][:12]
    events = report["restarts"]["events"]
    assert any(e["node"] == "ps-0" for e in events)
    assert_exactly_once(spec, DIGITS, 6)
    assert report["accounting"]["exactly_once"]
