"""The service's runner process (service/runner.py) ends as it always has: exit 0 with the
report written; 1, 2 or 128+N with one ``error:`` line; through runtime/run.py's front door."""

from __future__ import annotations

import json
import signal
import socket

import pytest

import rightsize.runtime.master as master_module
from rightsize.core.errors import SpecError
from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape
from rightsize.runtime.errors import ExactlyOnceViolated, JobFailed, JobInterrupted
from rightsize.runtime.lease import LeaseClosed
from rightsize.scaling.api import Action, Plan
from rightsize.service import runner
from rightsize.service.lease import PipeLease
from test_runtime_run import ScriptedMaster, job


@pytest.fixture
def scripted(monkeypatch):
    ScriptedMaster.ends, ScriptedMaster.built = [], []
    monkeypatch.setattr(master_module, "Master", ScriptedMaster)
    monkeypatch.setattr(runner, "die_with_parent", lambda _pid: None)  # not the test's parent
    return ScriptedMaster


def run_runner(tmp_path, capsys, launch: Plan | None = None) -> tuple[int, str]:
    job_file = tmp_path / "job.json"
    job_file.write_text(json.dumps(job(tmp_path).model_dump(mode="json", by_alias=True)))
    ours, theirs = socket.socketpair()
    argv = ["--job", str(job_file), "--report", str(tmp_path / "report.json"),
            "--lease-fd", str(theirs.detach()), "--parent", "1"]  # fmt: skip
    if launch is not None:
        (tmp_path / "launch.json").write_text(json.dumps(launch.to_json()))
        argv += ["--launch", str(tmp_path / "launch.json")]
    try:
        code = runner.main(argv)
    finally:
        ours.close()
    return code, capsys.readouterr().err


def test_a_trained_job_exits_0_with_its_report_and_ran_under_the_lease(tmp_path, capsys,
                                                                        scripted):  # fmt: skip
    scripted.ends = [{"job": "door", "steps": 3}]
    code, err = run_runner(tmp_path, capsys)
    assert (code, err) == (0, "")
    assert json.loads((tmp_path / "report.json").read_text()) == {"job": "door", "steps": 3}
    assert isinstance(scripted.built[-1].kwargs["lease"], PipeLease)


@pytest.mark.parametrize("end, code, line", [
    (ExactlyOnceViolated("exactly-once check failed", {"job": "door"}), 1,
     "error: exactly-once check failed"),
    (JobFailed("node ps-0 failed 4 times"), 1, "error: node ps-0 failed 4 times"),
    (LeaseClosed("the service's lease is gone"), 1, "error: the service's lease is gone"),
    (SpecError("initial shape cannot run"), 2, "error: initial shape cannot run"),
    (JobInterrupted("stopped by SIGTERM", signal.SIGTERM), 143, "error: stopped by SIGTERM"),
])  # fmt: skip
def test_every_other_end_is_its_exit_status_and_one_line(tmp_path, capsys, scripted, end, code,
                                                         line):  # fmt: skip
    scripted.ends = [end]
    assert run_runner(tmp_path, capsys) == (code, line + "\n")
    # only a job that trained to its end leaves a report (exactly-once's, for the post-mortem)
    assert (tmp_path / "report.json").exists() == isinstance(end, ExactlyOnceViolated)


def test_the_admitted_launch_plan_reaches_the_master(tmp_path, capsys, scripted):
    shape = ClusterShape.from_counts(1, 2, Resources(0.5, 2**30), Resources(0.25, 2**30))
    plan = Plan(shape, Action.LAUNCH, "history: like run 3", {"speed": 12.5})
    scripted.ends = [{}]
    assert run_runner(tmp_path, capsys, launch=plan) == (0, "")
    assert scripted.built[-1].kwargs["launch"] == plan
