"""The front door (runtime/run.py): each way a master ends becomes one outcome, the report
is written before the caller hears of it, and the signal handlers are back afterwards."""

from __future__ import annotations

import json
import os
import signal

import pytest

import rightsize.runtime.master as master_module
from rightsize.core.errors import SpecError
from rightsize.core.spec import parse_job_spec
from rightsize.core.status import JobStatus
from rightsize.runtime.errors import ExactlyOnceViolated, JobFailed, JobInterrupted
from rightsize.runtime.lease import LeaseClosed
from rightsize.runtime.run import ExitCode, JobOutcome, run_job
from rightsize.scaling.registry import policy_for


def job(tmp_path, policy: dict | None = None):
    data = {"name": "door", "workload": "mlp3", "batch_size": 32, "epochs": 1,
            "budget": {"cpu": 2, "memory": "4Gi"}, "checkpoint": {"dir": str(tmp_path)}}
    if policy is not None:
        data["policy"] = policy
    return parse_job_spec(data, "test")


class ScriptedMaster:
    """A master whose ``run`` does what the test says (the real one trains a job)."""

    ends: list = []  # what run() does: a report to return or an exception to raise
    built: list = []

    def __init__(self, spec, policy, **kwargs) -> None:
        self.policy, self.kwargs, self.stops = policy, kwargs, []
        ScriptedMaster.built.append(self)

    def request_stop(self, signum: int) -> None:
        self.stops.append(signum)

    def run(self):
        end = ScriptedMaster.ends.pop(0)
        if callable(end):
            end = end(self)
        if isinstance(end, BaseException):
            raise end
        return end


@pytest.fixture
def scripted(monkeypatch):
    ScriptedMaster.ends, ScriptedMaster.built = [], []
    monkeypatch.setattr(master_module, "Master", ScriptedMaster)
    return ScriptedMaster


def test_a_finished_job_writes_its_report_with_the_command(tmp_path, scripted):
    scripted.ends = [{"job": "door", "steps": 3}]
    path = tmp_path / "out" / "report.json"
    outcome = run_job(job(tmp_path), path, command="rightsize run job.yaml")
    assert outcome == JobOutcome(JobStatus.FINISHED, 0, {"job": "door", "steps": 3,
                                                         "command": "rightsize run job.yaml"})
    assert json.loads(path.read_text()) == outcome.report
    scripted.ends = [{"job": "again"}]
    run_job(job(tmp_path), path)
    assert json.loads(path.read_text()) == {"job": "again"}  # no command: none recorded


def test_a_broken_exactly_once_check_fails_with_its_report_written(tmp_path, scripted):
    scripted.ends = [ExactlyOnceViolated("exactly-once check failed: epoch 1", {"job": "door"})]
    outcome = run_job(job(tmp_path), tmp_path / "r.json")
    assert (outcome.status, outcome.exit_code, outcome.refused) == (JobStatus.FAILED, 1, False)
    assert outcome.failure == "exactly-once check failed: epoch 1"
    assert json.loads((tmp_path / "r.json").read_text()) == {"job": "door"} == outcome.report


@pytest.mark.parametrize("error, status, code", [
    (JobFailed("node ps-0 failed 4 times"), JobStatus.FAILED, ExitCode.FAILED),
    (LeaseClosed("the service's lease is gone"), JobStatus.FAILED, ExitCode.FAILED),
    (JobInterrupted("stopped by SIGTERM", signal.SIGTERM), JobStatus.INTERRUPTED, 128 + 15),
])  # fmt: skip
def test_a_job_that_stops_early_has_no_report(tmp_path, scripted, error, status, code):
    scripted.ends = [error]
    outcome = run_job(job(tmp_path), tmp_path / "r.json")
    assert outcome == JobOutcome(status, code, None, str(error))
    assert not (tmp_path / "r.json").exists()


def test_a_job_that_cannot_run_is_refused_and_other_errors_are_not_hidden(tmp_path, scripted):
    scripted.ends = [SpecError("initial shape cannot run: no worker")]
    outcome = run_job(job(tmp_path), tmp_path / "r.json")
    assert outcome == JobOutcome(JobStatus.FAILED, ExitCode.CANNOT_RUN, None,
                                 "initial shape cannot run: no worker", refused=True)  # fmt: skip
    outcome = run_job(job(tmp_path), tmp_path / "r.json", policy="no-such-policy")
    assert outcome.refused and "unknown policy" in outcome.failure
    scripted.ends = [RuntimeError("a bug")]  # a bug is a traceback, not an outcome
    with pytest.raises(RuntimeError, match="a bug"):
        run_job(job(tmp_path), tmp_path / "r.json")


def test_signals_ask_the_master_to_stop_while_it_runs_and_are_restored(tmp_path, scripted):
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

    def stopped(master):
        os.kill(os.getpid(), signal.SIGTERM)  # delivered to the handler run_job installed
        assert master.stops == [signal.SIGTERM]
        return JobInterrupted("stopped by SIGTERM", master.stops[0])

    scripted.ends = [stopped]
    assert run_job(job(tmp_path), tmp_path / "r.json").exit_code == 128 + signal.SIGTERM
    assert {sig: signal.getsignal(sig) for sig in before} == before


def test_the_master_gets_the_callers_settings_and_the_policy(tmp_path, scripted):
    scripted.ends = [{}]
    lease, warn = object(), print
    run_job(job(tmp_path, {"name": "static"}), tmp_path / "r.json", fresh=True, lease=lease,
            warn=warn, oversubscribe=True)  # fmt: skip
    master = scripted.built[-1]
    assert master.policy.name == "static"
    assert master.kwargs | {"lease": lease} == {
        "fresh": True, "warn": warn, "on_sample": None, "oversubscribe": True, "lease": lease,
        "launch": None}  # fmt: skip


def test_a_policy_override_takes_its_own_defaults(tmp_path):
    spec = job(tmp_path, {"name": "nearchus", "params": {"r0": 0.3}})
    assert policy_for(spec).name == "nearchus"
    assert policy_for(spec, "static").name == "static"  # r0 is nearchus's: static's defaults
