"""Real jobs through the service: queued, admitted as capacity frees, trained, recorded;
cancelled while running; and a service killed with SIGKILL whose jobs resume on restart.

Capacity is checked against the kernel (the CPU quotas on the jobs' node cgroups,
sampled while they run), not against the allocator's books.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from rightsize.core.resources import Resources
from rightsize.core.spec import parse_job_spec
from rightsize.service.allocator import Allocator
from rightsize.service.models import JobPhase
from rightsize.service.store import Store
from service_helpers import free_port, held_cpu_cores, serve

pytestmark = pytest.mark.integration
GI = 2**30


def job(name: str, steps: int, cpu: float, **fields) -> dict:
    """MLP-3 on digits, one PS and one worker of ``cpu / 2`` each."""
    half = cpu / 2
    data = {
        "name": name, "workload": "mlp3", "options": {"hidden": 64}, "dataset": "digits",
        "batch_size": 64, "steps": steps, "strategy": "ps",
        "budget": {"cpu": cpu, "memory": "4Gi"},
        "initial_shape": {"ps": {"count": 1, "cpu": half, "memory": "1Gi"},
                          "workers": {"count": 1, "cpu": half, "memory": "1Gi"}},
        "checkpoint": {"interval": "2s"}, "training": {"optimizer": "sgd", "lr": 0.05},
        "runtime": {"metric_interval": "1s", "shard_size": 128, "startup_timeout": "240s"},
    }  # fmt: skip
    data.update(fields)
    return data


def runner_pids(allocator: Allocator) -> set[int]:
    with allocator.lock:
        return {runner.process.pid for runner in allocator.runners.values()}


def wait_for(predicate, timeout_s: float, every_s: float = 0.5, during=lambda: None):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        during()
        if predicate():
            return
        time.sleep(every_s)
    raise AssertionError(f"not within {timeout_s}s")


def test_jobs_queue_run_and_are_recorded_within_capacity(tmp_path):
    store = Store(str(tmp_path / "store.db"))
    capacity = Resources(1.0, 8 * GI)
    allocator = Allocator(store, capacity, tmp_path / "work", poll_s=0.3)
    allocator.start()
    held = []
    try:
        first = allocator.submit(parse_job_spec(job("first", 150, 0.8)), owner_id=None)
        second = allocator.submit(parse_job_spec(job("second", 60, 0.6)), owner_id=None)
        third = allocator.submit(parse_job_spec(job("third", 4000, 0.2)), owner_id=None)

        def sample():
            cores = held_cpu_cores(runner_pids(allocator))
            if cores is not None:
                held.append(cores)

        wait_for(lambda: store.job_by_id(first.id).phase == "running", 120, during=sample)
        # FCFS: the second (0.6 of the 0.2 left) waits, and the third behind it, though it fits
        assert store.job_by_id(second.id).phase == "waiting"
        assert store.job_by_id(third.id).phase == "waiting"
        wait_for(lambda: store.job_by_id(second.id).phase == "running", 300, during=sample)
        wait_for(lambda: store.job_by_id(third.id).phase == "running", 300, during=sample)
        # cancel the third while it runs: it checkpoints, stops and gives its share back
        wait_for(lambda: store.samples(third.id), 120, during=sample)
        allocator.cancel("third")
        wait_for(lambda: JobPhase(store.job_by_id(third.id).phase).done, 120, during=sample)
        wait_for(lambda: JobPhase(store.job_by_id(second.id).phase).done, 300, during=sample)
    finally:
        allocator.stop()
    assert held, "no cgroup quota was read"
    assert max(held) >= 0.75, max(held)  # the first job's 0.8 was read from the kernel
    assert max(held) <= capacity.cpu_cores + 0.01, max(held)
    assert store.job_by_id(third.id).phase == "cancelled"
    for done in (first, second):
        view = store.job_by_id(done.id)
        assert view.phase == "finished", view.error
        assert view.accounting["exactly_once"] is True
        assert view.measured_time_s > 0 and view.measured_core_h > 0
        assert view.launch_source == "job file"
        shapes = store.shapes(done.id)
        assert shapes[0].action == "launch" and shapes[0].transition_s is not None
        samples = store.samples(done.id)
        assert samples and all(s.nodes for s in samples)
        assert {n.role for n in samples[-1].nodes} == {"ps", "worker"}
        assert store.report(done.id)["steps"] == store.spec_of(done.id)["steps"]
    assert allocator.scheduler.allocated == Resources()
    store.close()


def cli(*args: str, env: dict, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rightsize", *args], capture_output=True,
                          text=True, env=env, timeout=timeout)  # fmt: skip


def test_a_killed_service_resumes_its_jobs_exactly_once(tmp_path):
    """Three jobs running when the service is SIGKILLed: a new service on the same store
    resumes each from its checkpoint and trains it to the end, every sample exactly once."""
    database, port, log = tmp_path / "store.db", free_port(), tmp_path / "serve.log"
    store = Store(str(database))
    token = store.create_token("tester")
    env = {**os.environ, "RIGHTSIZE_SERVER": f"http://127.0.0.1:{port}",
           "RIGHTSIZE_TOKEN": token}  # fmt: skip
    steps = 3000  # MLP-3 runs ~100 steps/s at 0.3 cpu on a quiet host: killed midway
    names = []
    service = serve(database, port, log)
    try:
        wait_for(lambda: cli("jobs", env=env).returncode == 0, 60)
        for i in range(3):  # 0.3 cpu each: all three run at once on the service's 1 cpu
            job_file = tmp_path / f"job-{i}.json"  # JSON is YAML
            job_file.write_text(json.dumps(job(f"survivor-{i}", steps, 0.3)))
            submitted = cli("submit", str(job_file), "--json", env=env)
            assert submitted.returncode == 0, submitted.stderr
            names.append(json.loads(submitted.stdout)["name"])

        def steps_done() -> list[int]:
            rows = json.loads(cli("jobs", "--json", env=env).stdout)
            shown = [json.loads(cli("job", r["name"], "--json", env=env).stdout) for r in rows]
            return [s["latest"]["steps_done"] if s["latest"] else 0 for s in shown]

        wait_for(lambda: min(steps_done()) > 100, 240, every_s=1.0)
        time.sleep(3)  # past a checkpoint interval
        at_kill = steps_done()
        assert max(at_kill) < steps - 200, f"a job was nearly done ({at_kill}) before the kill"
        service.send_signal(signal.SIGKILL)
        service.wait(30)
        service = serve(database, port, log)
        wait_for(lambda: cli("jobs", env=env).returncode == 0, 60)

        # each followed to its end over the restarted service's event stream
        followed, shown = {}, {}
        for name in names:
            run = cli("job", name, "--follow", "--json", env=env, timeout=300)
            assert run.returncode == 0, run.stderr
            followed[name] = [json.loads(line) for line in run.stdout.splitlines()]
            shown[name] = json.loads(cli("job", name, "--json", env=env).stdout)
    finally:
        service.send_signal(signal.SIGTERM)
        stopped = service.wait(90)
    for name in names:
        view, events = shown[name]["job"], followed[name]
        assert view["phase"] == "finished", (name, view["error"], log.read_text()[-2000:])
        assert view["accounting"]["exactly_once"] is True, name
        assert any(s["action"] == "resume" for s in shown[name]["shapes"]), shown[name]["shapes"]
        assert events[-1]["event"] == "end" and events[-1]["data"]["phase"] == "finished"
        seqs = [e["data"]["seq"] for e in events if e["event"] == "sample"]
        assert seqs == sorted(set(seqs)), seqs  # every sample once, in order
        report = store.report(view["id"])
        assert report["restarts"]["masters"] >= 1 and report["steps"] == steps, name
    # the first one followed saw its resume live (the others may have ended before theirs
    # were asked for)
    assert any(e["event"] == "shape" and e["data"]["action"] == "resume"
               for e in followed[names[0]])  # fmt: skip
    # SIGTERM is how a service is told to stop: status 0 and no error line
    assert stopped == 0 and "error:" not in log.read_text(), log.read_text()[-2000:]
    store.close()


def test_a_growing_policy_grows_only_into_what_is_free(tmp_path):
    """A NEARCHUS+ job beside a static one grows into the capacity the static one leaves, and
    no further: the kernel's quotas never exceed the capacity, and every shape it ran while
    the other held its share fits beside it."""
    store = Store(str(tmp_path / "store.db"))
    capacity = Resources(2.0, 8 * GI)  # NEARCHUS+ starts at R0 = 1/4 of a budget of >= 2
    allocator = Allocator(store, capacity, tmp_path / "work", poll_s=0.3)
    allocator.start()
    held = []

    def sample():
        cores = held_cpu_cores(runner_pids(allocator))
        if cores is not None:
            held.append(cores)

    try:
        fixed = allocator.submit(parse_job_spec(job("fixed", 100_000, 1.0)), owner_id=None)
        wait_for(lambda: store.job_by_id(fixed.id).phase == "running", 120, during=sample)
        grower = job("grower", 100_000, 2.0, initial_shape="auto", policy={"name": "nearchus+"})
        growing = allocator.submit(parse_job_spec(grower), owner_id=None)

        def grew() -> bool:  # the allocator copies the timeline every 2 s
            return any(s.applied and s.action != "launch" for s in store.shapes(growing.id))

        wait_for(grew, 300, during=sample)
        assert store.job_by_id(fixed.id).phase == "running"  # it held its share throughout
        for name in ("fixed", "grower"):
            allocator.cancel(name)
        wait_for(lambda: all(JobPhase(store.job_by_id(j.id).phase).done
                             for j in (fixed, growing)), 120, during=sample)  # fmt: skip
    finally:
        allocator.stop()
    assert held and max(held) <= capacity.cpu_cores + 0.01, max(held)
    shapes = [s for s in store.shapes(growing.id) if s.applied and s.action != "resume"]
    cores = [sum(n["cpu"] for n in s.shape["nodes"]) for s in shapes]
    assert cores[-1] > cores[0]  # it grew
    assert max(cores) <= capacity.cpu_cores - 1.0 + 0.01, cores  # beside the fixed job's 1.0
    store.close()
