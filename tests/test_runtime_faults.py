"""Fault tolerance with real processes: SIGKILL a worker, a parameter server, the master.

Each job runs as ``rightsize run`` in its own process group. The test waits for
training to be under way (reading the master's state file), kills a process by its
pid, and lets the job finish (a killed master is simply run again). It then reads
the update logs in the final checkpoint itself and checks that every sample index
was applied exactly once per epoch, on every parameter server.
"""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from rightsize.runtime.chaos import counter_job, node_processes, steps_done, trained_counts
from test_runtime_jobs import assert_exactly_once, job_spec

pytestmark = pytest.mark.integration
TIMEOUT_S = 240
#: Long enough (60 x 29 steps) that a kill after the first checkpoint lands mid-training.
EPOCHS = 60


def start(job: Path) -> subprocess.Popen:
    # progress on stderr (not --quiet): if a run ever hangs, it shows where
    return subprocess.Popen(
        [sys.executable, "-m", "rightsize", "run", str(job), "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip


def finish(proc: subprocess.Popen) -> dict:
    try:
        out, err = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"the job hung for {TIMEOUT_S}s; its last output:\n{err.decode()[-3000:]}")
    assert proc.returncode == 0, err.decode()[-2000:]
    return json.loads(out)


def write_job(tmp_path: Path, **fields) -> tuple[Path, object]:
    spec = job_spec(tmp_path, **fields)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec.model_dump(mode="json", by_alias=True)))
    return path, spec


def wait_for(predicate, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def latest_version(spec) -> int:
    """The newest committed checkpoint version in the state file (0 if none yet)."""
    if not spec.state_path.exists():
        return 0
    try:
        with sqlite3.connect(spec.state_path, timeout=5) as db:
            return db.execute("SELECT MAX(version) FROM checkpoints").fetchone()[0] or 0
    except sqlite3.OperationalError:  # not created yet
        return 0


def kill_node_when_training(proc, spec, name: str, min_steps: int) -> int:
    wait_for(lambda: steps_done(spec) >= min_steps and latest_version(spec) >= 1, "training")
    pid = node_processes(proc.pid).get(name)
    assert pid is not None, f"no process for {name}"
    os.kill(pid, signal.SIGKILL)
    return pid


def test_a_worker_killed_mid_epoch_is_replaced(tmp_path):
    job, spec = write_job(tmp_path, epochs=EPOCHS, initial_shape={
        "ps": {"count": 2, "cpu": 0.5, "memory": "1Gi"},
        "workers": {"count": 2, "cpu": 0.5, "memory": "1Gi"}})  # fmt: skip
    proc = start(job)
    kill_node_when_training(proc, spec, "worker-1", min_steps=60)
    report = finish(proc)
    assert report["restarts"]["nodes"] == {"worker-1": 1}
    assert [e["kind"] for e in report["restarts"]["events"]] == ["failed"]
    assert any(t["action"] == "relaunch_worker" for t in report["timeline"])
    assert_exactly_once(spec, 1797, EPOCHS)


def test_a_killed_parameter_server_is_restored_from_the_checkpoint(tmp_path):
    job, spec = write_job(tmp_path, epochs=EPOCHS, initial_shape={
        "ps": {"count": 2, "cpu": 0.5, "memory": "1Gi"},
        "workers": {"count": 2, "cpu": 0.5, "memory": "1Gi"}})  # fmt: skip
    proc = start(job)
    kill_node_when_training(proc, spec, "ps-1", min_steps=60)
    report = finish(proc)
    assert report["restarts"]["nodes"] == {"ps-1": 1}
    restore = [t for t in report["timeline"] if t["action"] == "restore_ps"]
    assert restore and "restored from checkpoint v" in restore[0]["reason"]
    assert_exactly_once(spec, 1797, EPOCHS)


def test_a_killed_master_is_resumed_by_the_next_run(tmp_path):
    job, spec = write_job(tmp_path, epochs=EPOCHS)
    proc = start(job)
    wait_for(lambda: latest_version(spec) >= 1 and steps_done(spec) >= 60, "a checkpoint")
    nodes = [node_processes(proc.pid).get(n) for n in ("ps-0", "worker-0", "worker-1")]
    os.killpg(proc.pid, signal.SIGKILL)  # the master and nothing else: nodes are in own sessions
    proc.wait()
    wait_for(lambda: not any(Path(f"/proc/{p}").exists() for p in nodes if p), "nodes dying")
    report = finish(start(job))
    assert report["restarts"]["masters"] == 1
    assert report["timeline"][-1]["action"] == "resume"
    assert "resuming from checkpoint v" in report["timeline"][-1]["reason"]
    assert_exactly_once(spec, 1797, EPOCHS)


def test_sigint_and_sigterm_checkpoint_and_the_rerun_resumes(tmp_path):
    job, spec = counter_job(tmp_path, epochs=40)
    resumed_from = []
    for sig, code in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
        proc = start(job)
        before = latest_version(spec)
        wait_for(lambda b=before: latest_version(spec) > b and steps_done(spec) > 0, "a checkpoint")
        # SIGINT as a terminal sends it (the whole foreground group); SIGTERM to the master
        os.killpg(proc.pid, sig) if sig == signal.SIGINT else proc.send_signal(sig)
        _, err = proc.communicate(timeout=TIMEOUT_S)
        lines = err.decode().strip().splitlines()
        assert proc.returncode == code and "Traceback" not in err.decode(), err.decode()[-2000:]
        name = signal.Signals(sig).name
        assert lines[-1].startswith(f"error: interrupted by {name}; checkpoint v"), lines[-1]
        resumed_from.append(int(lines[-1].split("checkpoint v")[1].split()[0]))
    report = finish(start(job))
    resumes = [t["reason"] for t in report["timeline"] if t["action"] == "resume"]
    assert len(resumes) == 2  # each rerun resumed from the checkpoint its signal took
    assert all(f"resuming from checkpoint v{v}" in r
               for r, v in zip(resumes, resumed_from, strict=True))  # fmt: skip
    assert all(c.min() == c.max() == 40 for c in trained_counts(spec).values())
