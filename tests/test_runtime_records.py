"""The runtime's records keep the JSON the state file and reports have always held, and
refuse values they do not know; the report is built from values alone."""

from __future__ import annotations

import json

import pytest

from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape, NodeRole
from rightsize.core.spec import Strategy
from rightsize.runtime.backends.isolation import IsolationMode
from rightsize.runtime.jobstate import JobState
from rightsize.runtime.metrics import progress, progress_status
from rightsize.runtime.records import ProgressStatus, TimelineAction, TimelineRow, timeline_action
from rightsize.runtime.report import build_report
from rightsize.scaling.api import Action, MetricSample, NodeMetrics

GI = 2**30
SHAPE = ClusterShape.from_counts(1, 1, Resources(1, GI), Resources(2, GI))


def status_dict(time_s: float, samples_per_s: float, cpu_used: float = 0.5) -> dict:
    job = JobState(None, Strategy.PS, {})
    job.take_shape(SHAPE)
    node = NodeMetrics("worker-0", NodeRole.WORKER, cpu_used, 2.0, memory_used_bytes=GI // 2,
                       memory_allocated_bytes=GI, steps_per_s=3.0)  # fmt: skip
    sample = MetricSample(time_s, (node,), 3.0, samples_per_s=samples_per_s)
    return progress_status(sample, job, steps_done=12, steps_total=None, loss=0.25)


def row(time_s: float, action: str, applied: bool = True, transition_s: float | None = 1.0) -> dict:
    return {"time_s": time_s, "action": action, "reason": "why", "shape": SHAPE.to_dict(),
            "applied": applied, "transition_s": transition_s, "details": {"launch_s": 0.5},
            "notes": {}}  # fmt: skip


def test_a_progress_reading_keeps_the_state_files_json_byte_for_byte():
    data = status_dict(1.23456, 48.0)
    assert list(data) == ["time_s", "epoch", "steps_done", "steps_total", "steps_per_s",
                          "samples_per_s", "loss", "e_job", "shape", "nodes"]  # fmt: skip
    assert list(data["nodes"][0]) == ["name", "role", "cpu_used", "cpu_allocated",
                                      "memory_used", "memory_allocated", "net_in", "net_out",
                                      "steps_per_s"]  # fmt: skip
    record = ProgressStatus.from_json(json.loads(json.dumps(data)))
    assert json.dumps(record.to_json()) == json.dumps(data)
    assert record.time_s == 1.235 and record.nodes[0].memory_used_bytes == GI // 2


def test_progress_is_the_record_progress_status_serializes():
    job = JobState(None, Strategy.PS, {})
    sample = MetricSample(2.0, (), 1.0)
    assert progress(sample, job, 1, 10, None).to_json() == progress_status(sample, job, 1, 10, None)


def test_a_timeline_row_round_trips_and_refuses_an_unknown_action():
    data = row(3.0, "restore_ps")
    record = TimelineRow.from_json(data)
    assert record.action is TimelineAction.RESTORE_PS and record.to_json() == data
    assert timeline_action("add_worker") is Action.ADD_WORKER
    with pytest.raises(ValueError, match="'teleport'"):
        TimelineRow.from_json(row(3.0, "teleport"))


def test_isolation_modes_are_named_as_reports_have_always_named_them():
    assert IsolationMode.of_cgroups(1) == "cgroup-v1"
    assert IsolationMode.of_cgroups(None) == "affinity"
    assert IsolationMode.on_ray(IsolationMode.CGROUP_V2) == "ray+cgroup-v2"
    assert IsolationMode.on_ray(None) == "ray"
    with pytest.raises(ValueError):
        IsolationMode.of_cgroups(3)


def test_the_report_is_built_from_values():
    timeline = [row(0.0, "launch"), row(10.0, "add_worker"), row(12.0, "interrupt", False, None),
                row(20.0, "relaunch_worker", False, None)]  # fmt: skip
    readings = ((5.0, 10.0, 0.5), (9.0, 20.0, 1.5), (15.0, 40.0, 1.0), (25.0, 30.0, 1.0))
    samples = [status_dict(t, rate, cpu) for t, rate, cpu in readings]
    report = build_report(
        job="j", workload="mnist", strategy="ps", policy="static", isolation="affinity",
        wall_time_s=30.0, headline={"steps": 12, "accounting": {"checked": False}},
        final_shape=SHAPE.to_dict(), timeline=timeline, samples=samples, masters=2,
        node_restarts={"worker-0": 1}, events=[],
    )  # fmt: skip
    assert list(report)[:8] == ["job", "workload", "strategy", "policy", "isolation",
                                "wall_time_s", "steps", "accounting"]  # fmt: skip
    assert report["timeline"] == timeline
    assert [m["action"] for m in report["moves"]] == ["add_worker", "relaunch_worker"]
    add = report["moves"][0]
    assert (add["samples_per_s_before"], add["samples_per_s_after"]) == (15.0, 35.0)
    assert [t["action"] for t in report["transitions"]] == ["launch", "add_worker"]
    assert report["throughput"][2] == {"time_s": 15.0, "steps_per_s": 3.0,
                                       "samples_per_s": 40.0, "loss": 0.25,
                                       "e_job": samples[2]["e_job"]}  # fmt: skip
    usage = report["nodes"]["worker-0"]
    assert usage["cpu_used_mean"] == 1.0 and usage["intervals"] == 4
    assert report["restarts"] == {"masters": 1, "nodes": {"worker-0": 1}, "events": []}


def test_the_progress_line_and_table_read_the_record_by_its_units():
    from rightsize.cli.run_cmd import node_table, status_line

    record = ProgressStatus.from_json(status_dict(61.0, 48.0, cpu_used=0.5))
    line = status_line(record)
    assert "epoch" in line and "steps 12/?" in line and "48 samples/s" in line
    assert "loss 0.2500" in line and "cpu 0.50/2.00" in line
    table = node_table(record)
    assert "worker-0" in table and "0.50/2.00" in table and "3.0" in table


def test_a_status_from_an_earlier_state_file_reads_its_missing_fields_as_unknown():
    data = status_dict(2.0, 10.0)
    for optional in ("epoch", "steps_total", "loss", "e_job", "shape"):
        del data[optional]
    record = ProgressStatus.from_json(data)
    assert (record.epoch, record.steps_total, record.loss, record.e_job) == (None,) * 4
    assert record.shape == "" and record.samples_per_s == 10.0
