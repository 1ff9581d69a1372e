"""Every move a policy can ask for, made by a real policy on a real job (issue 17, item 3).

Each test runs one of the example job files as ``rightsize run FILE --policy NAME`` builds
it — the file's job, the registry's policy with the file's parameters on the file's metric
interval, the master — with its checkpoints in a temporary directory. The policies run at
their defaults: the moves happen for the reasons each file's header gives. A test ends the
job a few steps after the move (the job's whole work is the benchmark's:
``benchmarks/run/runtime_moves.py``), reads the move from the report's timeline with the
benchmark's own reading (``moves_of``: what was applied, from the shapes and the
mechanism's timings) and requires every sample the servers applied to have been applied
exactly once per epoch, checked on the final checkpoint's update logs. Four of them take
12-35 s each here; the hot-PS replacement and the workers removed take a minute or more
and are marked ``slow`` (``pytest --slow`` runs them).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from rightsize.core.spec import parse_job_spec
from rightsize.runtime.master import Master
from rightsize.scaling.registry import make_policy

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: `benchmarks.`

from benchmarks.run.runtime_moves import moves_of  # noqa: E402

pytestmark = pytest.mark.integration
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
#: Steps trained after the move before the test ends the job (the new shape has trained).
STEPS_AFTER = 20


def run_example(
    tmp_path: Path, name: str, policy: str, move: str, epochs: int | None = None
) -> dict:
    """Run ``examples/NAME`` under ``policy`` until ``move`` has been applied (then
    ``STEPS_AFTER`` more steps); returns the report. ``epochs`` lengthens the file's job
    where the move may come late (the job still ends soon after the move)."""
    data = yaml.safe_load((EXAMPLES / name).read_text())
    data["checkpoint"]["dir"] = str(tmp_path / "ckpt")
    if epochs is not None:
        data["epochs"] = epochs
    spec = parse_job_spec(data)
    params = spec.policy.params if policy == spec.policy.name else {}
    master = Master(spec, make_policy(policy, spec.runtime.metric_interval_s, **params),
                    fresh=True, warn=lambda _line: None)  # fmt: skip
    moved: list[int] = []  # the step count when the move was applied
    apply, finished = master.apply, master.finished

    def watched(plan):
        transition = apply(plan)
        if transition.applied and not moved:
            if move in {m["move"] for m in moves_of(master.store.timeline())}:
                moved.append(master.steps_done())
        return transition

    master.apply = watched
    master.finished = lambda: finished() or bool(
        moved and master.steps_done() >= moved[0] + STEPS_AFTER)
    report = master.run()
    made = {m["move"] for m in moves_of(report["timeline"])}
    assert move in made, [(t["action"], t["applied"], t["reason"]) for t in report["timeline"]]
    assert report["accounting"]["checked"] and report["accounting"]["exactly_once"]
    return report


def test_nearchus_adds_a_ps_when_a_servers_link_is_saturated(tmp_path):
    report = run_example(tmp_path, "mlp-link-bound.yaml", "nearchus", "add_ps")
    add = next(t for t in report["timeline"] if t["action"] == "add_ps" and t["applied"])
    assert "PSN bottleneck on ps-0" in add["reason"]
    assert {"launch_s", "halt_s", "export_s", "paused_s"} <= set(add["details"])


@pytest.mark.slow  # about a minute here: 100 steps behind the hot PS, then the swap
def test_dlrover_replaces_a_hot_ps_with_a_bigger_one(tmp_path):
    report = run_example(tmp_path, "wide-deep-hot-ps.yaml", "dlrover", "replace_ps")
    replace = next(t for t in report["timeline"] if t["action"] == "replace_ps" and t["applied"])
    assert replace["reason"].startswith("hot ps-0")
    ps = {n["name"]: n["cpu"] for n in report["final_shape"]["nodes"] if n["role"] == "ps"}
    assert "ps-0" not in ps and ps["ps-3"] > 0.2  # the hot one left; its successor is bigger


def test_dlrover_removes_a_ps_and_resizes_the_rest_in_place(tmp_path):
    report = run_example(tmp_path, "wide-deep-too-big-ps.yaml", "dlrover", "remove_ps")
    made = {m["move"] for m in moves_of(report["timeline"])}
    assert {"resize_cpu", "resize_memory", "add_worker"} <= made


def test_nearchus_rebalances_idle_ps_cpu_to_the_worker(tmp_path):
    # NEARCHUS moves CPU once five samples are stable; Wide & Deep now trains about twice
    # as fast as when the file was written (docs/benchmarks.md, PS scaling), and a fresh
    # clone's run once finished the file's 6 epochs before that: 15 leave room
    run_example(tmp_path, "wide-deep-too-big-ps.yaml", "nearchus", "rebalance", epochs=15)


def test_an_oom_killed_worker_comes_back_with_twice_its_memory_under_nearchus(tmp_path):
    report = run_example(tmp_path, "wide-deep-oom.yaml", "nearchus", "relaunch_oom")
    assert any(e["kind"] == "oom_killed" for e in report["restarts"]["events"])
    assert report["restarts"]["nodes"].get("worker-0", 0) >= 1
    worker = next(n for n in report["final_shape"]["nodes"] if n["name"] == "worker-0")
    assert worker["memory"] >= 400 * 2**20  # twice the file's 200Mi (or its floor)


@pytest.mark.slow  # about 80 s here: three decisions, each after five stable samples
def test_nearchus_plus_removes_the_workers_that_did_not_pay(tmp_path):
    report = run_example(tmp_path, "mlp-one-shard.yaml", "nearchus+", "remove_worker")
    revert = next(t for t in report["timeline"] if t["action"] == "reshape" and t["applied"])
    assert revert["reason"].startswith("no improvement left: back to the fastest shape")
    assert "remove_s" in revert["details"]
