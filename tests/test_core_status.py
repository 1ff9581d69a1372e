"""One job-status vocabulary (core/status.py) and its mappings from the finer ones."""

from __future__ import annotations

import dataclasses

import pytest

from rightsize.cluster.simjob import SimJob
from rightsize.core.status import (
    PHASE_STATUS,
    SIMULATOR_STATUS,
    STATE_FILE,
    JobStatus,
    from_phase,
    from_simulator,
    from_state_file,
)
from rightsize.runtime.jobstate import Phase
from rightsize.service.models import JobPhase


def test_every_master_phase_has_a_status():
    assert set(PHASE_STATUS) == {str(p) for p in Phase}
    assert from_phase(Phase.HALTED) == JobStatus.RUNNING
    assert from_phase(Phase.FINISHING) == JobStatus.RUNNING  # the final checkpoint is running
    assert from_phase(Phase.INTERRUPTED) == JobStatus.INTERRUPTED


def test_every_simulator_state_has_a_status():
    # the simulator's state enum, found through the field that holds it (not by its name)
    states = type(next(f.default for f in dataclasses.fields(SimJob) if f.name == "state"))
    assert set(SIMULATOR_STATUS) == {str(s) for s in states}
    assert from_simulator("starting") == JobStatus.RUNNING  # holds resources, like a launch
    with pytest.raises(ValueError, match="unknown simulator job state 'paused'"):
        from_simulator("paused")


def test_the_state_file_holds_four_statuses_spelled_as_before():
    assert {str(s) for s in STATE_FILE} == {"running", "interrupted", "failed", "finished"}
    assert not JobStatus.FINISHED.resumable
    assert all(s.resumable for s in STATE_FILE - {JobStatus.FINISHED})
    assert from_state_file("interrupted") == JobStatus.INTERRUPTED
    with pytest.raises(ValueError, match="not a state file's job status"):
        from_state_file("waiting")


def test_the_store_keeps_its_phase_strings():
    # the service's phase column holds JobStatus's values: existing rows read the same
    assert JobPhase is JobStatus
    assert [str(p) for p in JobPhase] == ["waiting", "running", "finished", "failed",
                                          "cancelled", "interrupted"]  # fmt: skip
    assert {p for p in JobStatus if p.done} == {JobStatus.FINISHED, JobStatus.FAILED,
                                                JobStatus.CANCELLED, JobStatus.INTERRUPTED}
