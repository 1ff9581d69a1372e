"""Issue 40 item 6: ``plan --launcher`` writes a script that gives SkyPilot the predicted time.

The script is executed here against a small stand-in ``sky`` module (its table, its time
estimator, its choice, what it launches); where SkyPilot itself is installed, the last
test runs the script and SkyPilot's own optimizer on real ``sky`` objects, offline, on a
three-row SkyPilot catalog written for the test.
"""

import dataclasses
import importlib.util
import json
import os
import runpy
import subprocess
import sys
import textwrap
import types

import pytest
import yaml

from profile_factory import linear_profile
from rightsize.core.catalog import load_catalogs
from rightsize.core.spec import Constraints
from rightsize.perf.comm import AnalyticCommModel
from rightsize.planning.estimate import PlanRequest
from rightsize.planning.plan import CloudPlan, Config, Slot
from rightsize.planning.recommend import Market
from rightsize.planning.skypilot import task_shape
from rightsize.planning.skypilot_launcher import candidates
from test_cli import assert_one_line_error, run

pytestmark = pytest.mark.integration

TYPES = "g4dn.8xlarge:4,g3.8xlarge:4,p3.2xlarge:4"
# the stand-in's prices per node-hour: srift-2020's on-demand prices for the three types
PRICES = {"g4dn.8xlarge": 2.176, "g3.8xlarge": 2.28, "p3.2xlarge": 3.06}


@pytest.fixture(scope="module")
def profile_file(tmp_path_factory):
    return str(linear_profile().save(tmp_path_factory.mktemp("p") / "toy.json"))


def plan_args(profile_file, tmp_path, *extra):
    return ["plan", "--profile", profile_file, "--global-batch", "512", "--iterations", "1000",
            "--cloud", "srift-2020", "--instances", TYPES, "--quiet", "--top", "1",
            "--skypilot-yaml", str(tmp_path / "task.yaml"), "--run-command", "python train.py",
            "--launcher", str(tmp_path / "launch.py"), *extra]  # fmt: skip


@dataclasses.dataclass(frozen=True)
class FakeResources:
    infra: str | None = None
    instance_type: str | None = None
    use_spot: bool = False
    accelerators: tuple = ()

    def get_cost(self, seconds):
        return PRICES[self.instance_type] * seconds / 3600


class FakeTask:
    def __init__(self, num_nodes):
        self.num_nodes, self.resources, self.estimator = num_nodes, set(), None

    @classmethod
    def from_yaml(cls, path):
        return cls(yaml.safe_load(open(path))["num_nodes"])

    def set_resources(self, resources):
        self.resources = set(resources) if isinstance(resources, set) else {resources}

    def set_time_estimator(self, func):
        self.estimator = func


@pytest.fixture
def fake_sky(monkeypatch):
    sky = types.ModuleType("sky")
    sky.Task, sky.Resources, sky.launched = FakeTask, FakeResources, []
    sky.launch = lambda task, cluster_name=None: sky.launched.append((task, cluster_name))
    sky.stream_and_get = lambda request: request
    monkeypatch.setitem(sys.modules, "sky", sky)
    return sky


def launcher(profile_file, tmp_path, capsys, *extra):
    """Plan with --launcher, and the script's namespace (run as a module, not as __main__)."""
    code, out, err = run(capsys, *plan_args(profile_file, tmp_path, "--json", *extra))
    assert code == 0, err
    assert f"SkyPilot launcher written to {tmp_path / 'launch.py'}" in err
    return json.loads(out)[0], runpy.run_path(str(tmp_path / "launch.py"), run_name="launcher")


def test_the_table_holds_the_planners_times_for_the_tasks_shape(profile_file, tmp_path, capsys,
                                                                 fake_sky):  # fmt: skip
    best, script = launcher(profile_file, tmp_path, capsys)
    table = script["PREDICTED"]
    (exported,) = best["counts"]
    assert set(table) == {t.split(":")[0] for t in TYPES.split(",")}
    assert list(table)[0] == exported  # the task's own type first
    assert table[exported]["seconds"] == pytest.approx(best["total_seconds"], abs=0.1)
    assert table["g3.8xlarge"]["accelerator"] == "M60"
    assert table["g3.8xlarge"]["accelerator_count"] == 2
    assert script["FALLBACK_S"] == max(row["seconds"] for row in table.values())
    task = yaml.safe_load((tmp_path / "task.yaml").read_text())
    assert script["TASK_YAML"] == str((tmp_path / "task.yaml").resolve())
    assert task["resources"]["instance_type"] == exported


def test_the_estimator_answers_planned_types_and_falls_back_for_others(profile_file, tmp_path,
                                                                        capsys, fake_sky):  # fmt: skip
    _, script = launcher(profile_file, tmp_path, capsys)
    estimate, table = script["estimated_seconds"], script["PREDICTED"]
    assert estimate(FakeResources(instance_type="p3.2xlarge")) == table["p3.2xlarge"]["seconds"]
    # a type the plan did not evaluate, with a planned accelerator: that accelerator's time
    assert estimate(FakeResources(instance_type="p3.8xlarge", accelerators=("V100",))) == (
        table["p3.2xlarge"]["seconds"])
    # nothing planned about it: the slowest planned time
    unknown = FakeResources(instance_type="x1.big", accelerators=("TPU",))
    assert estimate(unknown) == script["FALLBACK_S"] > min(r["seconds"] for r in table.values())


def test_the_script_picks_the_lowest_total_cost_and_launches_it(profile_file, tmp_path, capsys,
                                                                fake_sky):  # fmt: skip
    _, script = launcher(profile_file, tmp_path, capsys)
    table = script["PREDICTED"]
    total = {name: PRICES[name] * row["seconds"] / 3600 for name, row in table.items()}
    cheapest_hour = min(PRICES, key=PRICES.get)
    cheapest_job = min(total, key=total.get)
    assert cheapest_job != cheapest_hour  # what an hour's estimate would have chosen wrongly
    assert script["main"](["--dry-run"]) == 0 and fake_sky.launched == []
    assert f"chosen: 1 x {cheapest_job}" in capsys.readouterr().out
    assert script["main"](["--cluster", "c1"]) == 0
    ((task, cluster),) = fake_sky.launched
    assert cluster == "c1" and [r.instance_type for r in task.resources] == [cheapest_job]
    assert task.estimator is script["estimated_seconds"]


def test_types_that_miss_the_deadline_or_the_budget_are_not_offered():
    market = Market.of(load_catalogs(["srift-2020"]), TYPES)
    options = market.options([linear_profile()])
    instances = {o.name: o.instance for o in options}
    shape = task_shape(CloudPlan(Config((Slot("g4dn.8xlarge", 1, 512),)), 1.0, 1000, 2.0,
                                 "srift"), instances, spot=False)  # fmt: skip
    comm = AnalyticCommModel()
    every = {c.instance.name: c.plan for c in candidates(shape, options, comm,
                                                           PlanRequest(512, 1000))}  # fmt: skip
    assert list(every)[0] == "g4dn.8xlarge" and set(every) == set(PRICES)
    times = sorted(p.total_seconds for p in every.values())
    fastest = [name for name, p in every.items() if p.total_seconds == times[0]]
    deadline = PlanRequest(512, 1000, Constraints(deadline=(times[0] + times[1]) / 2))
    assert [c.instance.name for c in candidates(shape, options, comm, deadline)] == fastest
    costs = sorted(p.total_cost for p in every.values())
    budget = PlanRequest(512, 1000, Constraints(budget=(costs[0] + costs[1]) / 2))
    (cheapest,) = candidates(shape, options, comm, budget)
    assert cheapest.plan.total_cost == costs[0]
    # a batch per node that a type cannot hold leaves it out
    big = dataclasses.replace(shape, worker_batch=10**6)
    assert candidates(big, options, comm, PlanRequest(10**6, 1000)) == []


@pytest.mark.parametrize(("drop", "extra", "fragment"), [
    (["--skypilot-yaml", "--run-command"], [], "--launcher is only read with --skypilot-yaml"),
    ([], ["--strategy", "ps"], "--launcher chooses among the allreduce plan's"),
    (["--launcher"], ["--launcher", "SAME"], "name the same file"),
])  # fmt: skip
def test_launcher_bad_inputs(profile_file, tmp_path, capsys, drop, extra, fragment):
    args = plan_args(profile_file, tmp_path)
    for flag in drop:
        i = args.index(flag)
        del args[i:i + 2]
    extra = [str(tmp_path / "task.yaml") if e == "SAME" else e for e in extra]
    code, _, err = run(capsys, *args, *extra)
    assert_one_line_error(code, err, fragment)
    assert not (tmp_path / "launch.py").exists()


# a SkyPilot catalog of the three types, in its v8 AWS columns (prices as PRICES), so that
# SkyPilot validates and prices them without fetching its catalog from the network
SKY_CATALOG = textwrap.dedent("""\
    InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,AvailabilityZone
    p3.2xlarge,V100,1,8,61,,3.06,0.92,us-east-1,use1-az1
    g4dn.8xlarge,T4,1,32,128,,2.176,0.65,us-east-1,use1-az1
    g3.8xlarge,M60,2,32,244,,2.28,0.68,us-east-1,use1-az1
""")
# SkyPilot's optimizer on the launcher's task, with and without the estimator (AWS taken as
# enabled: the check needs credentials this test has none of)
OPTIMIZE = textwrap.dedent("""\
    import runpy, sys
    import sky
    from sky import check, clouds
    from sky.optimizer import Optimizer
    from sky.utils.common import OptimizeTarget
    check.get_cached_enabled_clouds_or_refresh = lambda *a, **k: [clouds.AWS()]
    script = runpy.run_path(sys.argv[1], run_name="launcher")
    for with_estimator in (True, False):
        task = script["build_task"]()
        if not with_estimator:
            task.time_estimator_func = None
        with sky.Dag() as dag:
            dag.add(task)
        Optimizer.optimize(dag, minimize=OptimizeTarget.COST, quiet=True)
        print("estimator" if with_estimator else "one hour", task.best_resources.instance_type)
""")


@pytest.mark.skipif(importlib.util.find_spec("sky") is None,
                    reason="skypilot is not installed (pip install skypilot)")  # fmt: skip
def test_real_skypilot_takes_the_estimator_and_picks_by_total_cost(profile_file, tmp_path, capsys):
    home = tmp_path / "home"
    catalog = home / ".sky" / "catalogs" / "v8" / "aws" / "vms.csv"
    catalog.parent.mkdir(parents=True)
    catalog.write_text(SKY_CATALOG)
    code, out, err = run(capsys, *plan_args(profile_file, tmp_path, "--json"))
    assert code == 0, err
    env = {**os.environ, "HOME": str(home)}
    script = str(tmp_path / "launch.py")
    dry = subprocess.run([sys.executable, script, "--dry-run"], env=env, capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert dry.returncode == 0, dry.stderr
    chosen = dry.stdout.strip().splitlines()[-1].removeprefix("chosen: 1 x ")
    optimizer = subprocess.run([sys.executable, "-c", OPTIMIZE, script], env=env,
                               capture_output=True, text=True, timeout=300)  # fmt: skip
    assert optimizer.returncode == 0, optimizer.stderr
    picks = dict(line.rsplit(" ", 1) for line in optimizer.stdout.splitlines()
                 if line.startswith(("estimator ", "one hour ")))  # fmt: skip
    assert picks["estimator"] == chosen  # SkyPilot's optimizer agrees with the script's choice
    assert picks["one hour"] == min(PRICES, key=PRICES.get) != chosen  # and an hour would not
