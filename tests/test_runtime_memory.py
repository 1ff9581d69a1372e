"""Memory floors: what a node must hold, from the model (runtime.memory_need)."""

import yaml

from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape
from rightsize.core.spec import parse_job_spec
from rightsize.runtime.memory_need import PROCESS_BYTES, floored_plan, memory_need
from rightsize.runtime.model_io import layout_of
from rightsize.runtime.node import build_workload
from rightsize.scaling.api import Action, Plan

MI = 2**20


def need_of(optimizer="adagrad", **fields):
    data = {
        "name": "m", "workload": "wide-deep", "dataset": "synthetic-criteo",
        "options": {"embed_dim": 8, "hidden": [64, 32]}, "dataset_size": 20_000,
        "batch_size": 512, "strategy": "ps", "budget": {"cpu": 2, "memory": "6Gi"},
        "training": {"optimizer": optimizer, "lr": 0.05}, **fields,
    }  # fmt: skip
    spec = parse_job_spec(yaml.safe_load(yaml.safe_dump(data)))
    workload = build_workload(spec)
    return memory_need(spec, workload, layout_of(workload.make_model(seed=0)))


def shape(n_ps, memory=64 * MI):
    return ClusterShape.from_counts(n_ps, 2, Resources(0.1, memory), Resources(0.1, memory))


def test_floors_follow_what_each_node_holds():
    need = need_of()
    assert need.model_bytes > 30e6 and need.dense_bytes < need.model_bytes / 100  # the tables
    one, two = need.floors(shape(1)), need.floors(shape(2))
    # a server holding every table needs more than one holding half of them, and both more
    # than a worker, which pulls only the rows it touches
    assert one["ps-0"] > max(two["ps-0"], two["ps-1"]) > one["worker-0"] > PROCESS_BYTES
    assert one["worker-0"] == two["worker-1"] == need.worker_bytes()
    # Adagrad keeps a sum per parameter, SGD without momentum nothing
    assert need.floors(shape(1))["ps-0"] > need_of("sgd").floors(shape(1))["ps-0"]


def test_a_plan_is_raised_to_the_floors_and_says_so():
    need = need_of()
    small = Plan(shape(1), Action.LAUNCH, "launch")
    raised = floored_plan(small, need)
    assert [n.resources.memory_bytes for n in raised.shape.nodes] == list(
        need.floors(small.shape).values()
    )
    assert [n.resources.cpu_cores for n in raised.shape.nodes] == [0.1, 0.1, 0.1]
    assert "memory raised to floors: ps-0 64Mi->" in raised.reason
    roomy = Plan(shape(1, memory=4 * 2**30), Action.LAUNCH, "launch")
    assert floored_plan(roomy, need) is roomy  # nothing below: the policy's plan as it was
