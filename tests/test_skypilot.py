"""The SkyPilot export: what each kind of plan becomes, what the nodes run, and SkyPilot's own
schema (that one test skips where skypilot is not installed; nothing here installs it)."""

import copy
import os
import subprocess
import textwrap

import pytest
import yaml

from rightsize.core.catalog import load_catalog
from rightsize.core.errors import SpecError
from rightsize.planning.plan import CloudPlan, Config, Slot
from rightsize.planning.skypilot import (
    RightsizeRun,
    UserCommand,
    rightsize_checkout,
    task_config,
    task_notes,
    task_shape,
    task_yaml,
)

# A catalog named like a SkyPilot cloud: big.x is a 1-GPU worker, ps.x a CPU server with
# more network. Spot prices differ from on-demand so that the notes show which was used.
CATALOG = textwrap.dedent("""\
    InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,NetworkGbps,Price,SpotPrice,Region
    big.x,V100,1,8,61,10,3.0,1.0,us-east-1
    ps.x,,0,4,16,25,0.5,0.2,us-east-1
""")
IPS = "10.0.0.1\n10.0.0.2\n10.0.0.3"


@pytest.fixture(scope="module")
def instances(tmp_path_factory):
    path = tmp_path_factory.mktemp("cat") / "aws.csv"
    path.write_text(CATALOG)
    return {i.name: i for i in load_catalog(path)}


def cloud_plan(*slots, seconds_per_iter=0.5, price_per_hour=12.0, policy="srift"):
    return CloudPlan(Config(tuple(sorted(slots))), seconds_per_iter, 1000, price_per_hour, policy)


def node_output(config, rank, home=None):
    """What the task's run script prints on node ``rank`` of three (SkyPilot's variables set)."""
    env = {**os.environ, **config["envs"], "SKYPILOT_NODE_RANK": str(rank)}
    env["SKYPILOT_NODE_IPS"] = IPS
    if home is not None:
        env["HOME"] = str(home)
    done = subprocess.run(["bash", "-c", config["run"]], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_single_type_plan_exports_as_planned_pinned_to_its_region(instances):
    shape = task_shape(cloud_plan(Slot("big.x", 4, 32)), instances, spot=True)
    text = task_yaml(shape, UserCommand("python train.py"), spot=True)
    task = yaml.safe_load(text)
    assert task == task_config(shape, UserCommand("python train.py"), spot=True)
    assert (task["name"], task["num_nodes"], task["workdir"]) == ("rightsize-job", 4, ".")
    assert task["resources"] == {"infra": "aws/us-east-1", "instance_type": "big.x",
                                 "use_spot": True}  # fmt: skip
    # SkyPilot's schema wants strings: an int would pass its CLI (which converts) but not the schema
    assert task["envs"] == {"RIGHTSIZE_BATCH_PER_NODE": "32", "RIGHTSIZE_ITERATIONS": "1000",
                            "RIGHTSIZE_NUM_PS": "0"}  # fmt: skip
    assert task["run"].endswith("\npython train.py\n")
    assert text.startswith("# rightsize plan 4×big.x@32 (srift), predicted: 0.5 s/iter; 8m20s")
    assert "SkyPilot picks the zone" in text and "note:" not in text and not shape.notes


def test_the_papers_catalogs_pin_aws_and_a_users_catalog_any_cloud(tmp_path):
    srift = load_catalog("srift-2020").get("g4dn.8xlarge")
    plan = cloud_plan(Slot("g4dn.8xlarge", 2, 64))
    assert task_shape(plan, {"g4dn.8xlarge": srift}, spot=False).infra == "aws/us-east-1"
    path = tmp_path / "my-prices.csv"
    path.write_text(CATALOG.replace("us-east-1", "r1"))
    mine = load_catalog(path).get("big.x")
    assert task_shape(cloud_plan(Slot("big.x", 1, 8)), {"big.x": mine}, False).infra == "*/r1"


def test_a_mixed_plan_exports_only_as_a_named_single_type_stand_in(instances):
    mixed = cloud_plan(Slot("big.x", 2, 32), Slot("ps.x", 2, 32), seconds_per_iter=1.0,
                       price_per_hour=7.2)  # fmt: skip
    with pytest.raises(SpecError, match="mixes several; export the best single-type plan"):
        task_shape(mixed, instances, spot=False)
    single = cloud_plan(Slot("big.x", 4, 32), seconds_per_iter=2.0, price_per_hour=3.6)
    shape = task_shape(single, instances, spot=False, best=mixed)
    # 1000 steps: 1.0 s/iter -> 16m40s at $7.2/h = $2.00; 2.0 s/iter -> 33m20s at $3.6/h = $2.00
    (note,) = shape.notes
    assert "the best plan, 2×big.x@32 + 2×ps.x@32 (16m40s, $2.00), mixes instance types" in note
    assert "the best single-type plan, 4×big.x@32 (33m20s, $2.00)" in note
    assert f"# note: {note[:40]}" in task_yaml(shape, UserCommand("x"), spot=False)
    assert not task_shape(single, instances, spot=False, best=single).notes


def test_a_ps_plan_runs_its_servers_on_the_workers_type(instances):
    # 4 workers at $3/h and one server at $0.50/h; the server moves to a big.x: $15/h
    ps = Slot("ps.x", 1, 0, role="ps")
    shape = task_shape(cloud_plan(Slot("big.x", 4, 32), ps, price_per_hour=12.5), instances, False)
    assert (shape.num_nodes, shape.num_ps, shape.worker_batch) == (5, 1, 32)
    assert shape.instance.name == "big.x"
    (note,) = shape.notes
    assert "the parameter server runs on big.x nodes, not the planned ps.x" in note
    assert "$15.00/h instead of $12.50/h" in note and "10 Gbps instead of 25" in note
    # spot: 4 x $1 + $0.20 planned; the server's big.x costs $1 -> $5.00/h
    spot = task_shape(cloud_plan(Slot("big.x", 4, 32), ps, price_per_hour=4.2), instances, True)
    assert "$5.00/h instead of $4.20/h" in spot.notes[0]
    same = task_shape(cloud_plan(Slot("big.x", 4, 32), Slot("big.x", 2, 0, "ps")), instances, False)
    assert (same.num_nodes, same.num_ps, same.notes) == (6, 2, ())
    assert task_config(same, UserCommand("x"), False)["envs"]["RIGHTSIZE_NUM_PS"] == "2"


def test_every_node_learns_its_role_and_the_servers_addresses(instances):
    command = UserCommand('echo "$RIGHTSIZE_ROLE|$RIGHTSIZE_PS_HOSTS|$RIGHTSIZE_BATCH_PER_NODE"')
    one_ps = task_config(task_shape(cloud_plan(Slot("big.x", 2, 32), Slot("ps.x", 1, 0, "ps")),
                                    instances, False), command, False)  # fmt: skip
    roles = [node_output(one_ps, rank) for rank in range(3)]
    assert roles == ["ps|10.0.0.1|32\n", "worker|10.0.0.1|32\n", "worker|10.0.0.1|32\n"]
    two_ps = task_config(task_shape(cloud_plan(Slot("big.x", 1, 32), Slot("big.x", 2, 0, "ps")),
                                    instances, False), command, False)  # fmt: skip
    assert node_output(two_ps, 1) == "ps|10.0.0.1,10.0.0.2|32\n"
    assert node_output(two_ps, 2) == "worker|10.0.0.1,10.0.0.2|32\n"
    allreduce = task_config(task_shape(cloud_plan(Slot("big.x", 3, 8)), instances, False),
                            command, False)  # fmt: skip
    assert node_output(allreduce, 0) == "worker||8\n"


def test_rightsize_run_starts_the_job_on_the_head_node_only(instances, tmp_path):
    job = tmp_path / "job.yaml"
    command = RightsizeRun(job, tmp_path / "checkout")
    shape = task_shape(cloud_plan(Slot("big.x", 3, 32)), instances, False)
    config = task_config(shape, command, False)
    assert config["workdir"] == str(tmp_path / "checkout")
    assert config["file_mounts"] == {"~/rightsize-job/job.yaml": str(job)}
    assert "uv venv --allow-existing --python 3.11 ~/rightsize-venv" in config["setup"]
    stub = tmp_path / "home" / "rightsize-venv" / "bin" / "rightsize"
    stub.parent.mkdir(parents=True)
    stub.write_text('#!/bin/sh\necho rightsize "$@"\n')
    stub.chmod(0o755)
    home = tmp_path / "home"
    assert node_output(config, 0, home) == f"rightsize run {home}/rightsize-job/job.yaml\n"
    assert "node 1 has nothing to run" in node_output(config, 1, home)
    assert "nodes 1-2 have nothing to run" in task_notes(shape, command)[0]
    alone = task_shape(cloud_plan(Slot("big.x", 1, 32)), instances, False)
    assert task_notes(alone, command) == []


def test_the_checkout_and_the_command_are_checked():
    assert (rightsize_checkout() / "src" / "rightsize" / "planning" / "skypilot.py").is_file()
    with pytest.raises(SpecError, match="--run-command is empty"):
        UserCommand("  \n")


@pytest.fixture
def skypilot(monkeypatch, tmp_path):
    """SkyPilot's own task loading, imported with HOME in a temporary directory (importing
    it creates ~/.sky). Only what works offline: the schemas and the Task's own checks of
    name, run, envs, workdir and file mounts; resources are checked against the schema, since
    SkyPilot checks an instance type against its catalog, which it downloads."""
    monkeypatch.setenv("HOME", str(tmp_path))
    sky = pytest.importorskip("sky", reason="skypilot is not installed (pip install skypilot)")
    from sky.utils import common_utils, schemas

    def validate(config):
        common_utils.validate_schema(config, schemas.get_task_schema(), "Invalid task YAML: ")
        common_utils.validate_schema(
            config["resources"], schemas.get_resources_schema(), "Invalid resources: "
        )
        task = sky.Task.from_yaml_config({k: v for k, v in config.items() if k != "resources"})
        task.validate()
        return task

    return validate


def test_skypilots_own_schema_accepts_every_kind_of_export(skypilot, instances, tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("name: j\n")
    checkout = rightsize_checkout()
    mixed = cloud_plan(Slot("big.x", 2, 32), Slot("ps.x", 2, 32))
    allreduce = task_shape(cloud_plan(Slot("big.x", 4, 32)), instances, True)
    stand_in = task_shape(cloud_plan(Slot("big.x", 4, 32)), instances, False, best=mixed)
    ps = task_shape(cloud_plan(Slot("big.x", 4, 32), Slot("ps.x", 1, 0, "ps")), instances, False)
    for shape in (allreduce, stand_in, ps):
        for command in (UserCommand("python train.py"), RightsizeRun(job, checkout)):
            config = yaml.safe_load(task_yaml(shape, command, spot=False))
            task = skypilot(copy.deepcopy(config))
            assert task.num_nodes == shape.num_nodes
            assert task.envs["RIGHTSIZE_NUM_PS"] == str(shape.num_ps)
    # and the check can fail: a misspelt field, a number where SkyPilot wants a string
    with pytest.raises(ValueError, match="instance_type"):
        skypilot({**config, "resources": {"instance": "big.x"}})
    with pytest.raises(ValueError):
        skypilot({**config, "envs": {"RIGHTSIZE_NUM_PS": 1}})
