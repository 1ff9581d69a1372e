"""The right-sizing benchmark's arithmetic (benchmarks/run/runtime_rightsizing.py), by hand.

No job runs here: synthetic timelines and throughput rows, with the expected
numbers worked out in the comments.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: `benchmarks.`

from benchmarks.lib.errors import relative_error_percent  # noqa: E402
from benchmarks.run import runtime_rightsizing as rs  # noqa: E402


def shape(*cpus: float) -> dict:
    """A timeline row's shape (``ClusterShape.to_dict``) with nodes of these CPUs."""
    return {"nodes": [{"name": f"n{i}", "role": "worker", "cpu": c, "memory": 1, "gpus": 0}
                      for i, c in enumerate(cpus)]}  # fmt: skip


def row(time_s: float, action: str, cpus: tuple, applied: bool = True) -> dict:
    return {"time_s": time_s, "action": action, "shape": shape(*cpus), "applied": applied}


TIMELINE = [
    row(0.0, "launch", (0.2, 0.2, 0.2)),  # 0.6 cpu from 0 s
    row(10.0, "scale_up", (0.4, 0.4, 0.4)),  # 1.2 cpu from 10 s
    row(15.0, "add_worker", (0.5, 0.5, 0.5, 0.5), applied=False),  # rejected: no change
    row(30.0, "add_worker", (0.5, 0.5, 0.5, 0.5)),  # 2.0 cpu from 30 s
]


def test_cpu_seconds_integrates_applied_shapes_only():
    # 0.6 x 10 + 1.2 x 20 + 2.0 x 10 = 6 + 24 + 20 = 50 cpu-seconds to 40 s
    assert rs.cpu_seconds(TIMELINE, 40.0) == pytest.approx(50.0)


def test_plans_by_action_counts_after_the_launch():
    assert rs.plans_by_action(TIMELINE) == {
        "scale_up": {"applied": 1, "rejected": 0},
        "add_worker": {"applied": 1, "rejected": 1},
    }


THROUGHPUT = [{"time_s": t, "samples_per_s": r} for t, r in
              [(2, 100), (4, 500), (6, 940), (8, 960), (10, 900), (12, 980), (14, 1000)]]  # fmt: skip


def test_time_to_reach_is_the_first_interval_at_or_above():
    assert rs.time_to_reach(THROUGHPUT, 0.95 * 1000) == 8  # 940 < 950 <= 960
    assert rs.time_to_reach(THROUGHPUT, 960) == 8  # "at or above"
    assert rs.time_to_reach(THROUGHPUT, 1001) is None


def test_final_throughput_is_the_median_of_the_last_intervals():
    # last five: 940, 960, 900, 980, 1000 -> median 960
    assert rs.final_throughput(THROUGHPUT) == 960
    assert rs.final_throughput(THROUGHPUT, last=2) == 990
    assert rs.final_throughput([]) is None


def test_sweep_grid_stays_within_the_budget():
    grid = rs.sweep_grid(2.0)
    assert len(grid) == 18  # 2 PS counts x 3 shares x 3 worker counts
    assert (1, 0.4, 1, 1.6) in grid  # share 0.2: PS 0.4, one worker the other 1.6
    assert (2, 0.35, 3, 0.433) in grid  # share 0.35: 0.7 / 2 PS; 1.3 / 3 = 0.4333 -> 0.433
    assert all(p * pc + w * wc <= 2.0 + 1e-9 for p, pc, w, wc in grid)


def test_relative_error_and_ratio():
    assert relative_error_percent(55.0, 50.0) == pytest.approx(10.0)
    assert relative_error_percent(None, 50.0) is None
    assert rs.relative(30.0, 60.0) == 0.5
    assert rs.relative(None, 60.0) is None


def test_goals_compare_each_policy_with_the_static_start():
    rows = [
        {"start": "too-small", "policy": "static", "jct_s": 100.0, "jct_over_oracle": 2.0},
        {"start": "too-small", "policy": "nearchus+", "jct_s": 54.0, "jct_over_oracle": 1.08},
        {"start": "too-small", "policy": "dlrover", "jct_s": 120.0, "jct_over_oracle": 2.4},
        {"start": "too-small", "policy": "optimus", "error": "JobFailed: ..."},
    ]
    assert rs.goals(rows) == {"too-small": {
        "nearchus+_within_10pct_of_oracle": True,
        "faster_than_static_start": {"nearchus+": True, "dlrover": False},
    }}  # fmt: skip


def test_transitions_split_into_in_place_resizes_and_node_changes():
    def row(applied, transition_s, *nodes):
        shape = {"nodes": [{"name": n, "role": n.split("-")[0]} for n in nodes]}
        return {"applied": applied, "transition_s": transition_s, "shape": shape}

    timeline = [
        row(True, 7.4, "ps-0", "worker-0"),  # the launch
        row(True, 0.1, "ps-0", "worker-0"),  # resized in place
        row(False, 0.0, "ps-0", "worker-0", "worker-1"),  # rejected: not counted
        row(True, 9.5, "ps-0", "worker-0", "worker-1"),  # a worker added
        row(True, 2.3, "ps-0", "worker-0"),  # ... and removed
    ]
    assert rs.split_transitions(timeline) == ([0.1], [7.4, 9.5, 2.3])
    assert rs.parse_label(rs.label((2, 0.5, 3, 0.333))) == (2, 0.5, 3, 0.333)


def test_a_saved_sweep_stands_in_for_a_new_one_and_a_missing_one_is_refused(tmp_path, capsys):
    import json

    saved = {"workloads": [{"workload": "small-cnn", "oracle": {"sweep": [
        {"shape": "2x0.2ps+2x0.8wk", "steady_samples_per_s": 384.0}]}}]}  # fmt: skip
    rows = rs.saved_sweep(saved, "small-cnn")
    assert rows[0]["shape_tuple"] == (2, 0.2, 2, 0.8)
    path = tmp_path / "saved.json"
    path.write_text(json.dumps(saved))
    # wide-deep has no sweep there: one line and exit 2 before anything runs
    assert rs.main(["--sweep-from", str(path), "--workloads", "wide-deep"]) == 2
    assert "no wide-deep sweep" in capsys.readouterr().err


def test_epochs_sets_the_fixed_work_and_a_bad_count_is_refused(capsys):
    args = rs.argparse.Namespace(workloads="small-cnn", policies="static", starts="too-small",
                                 sweep_steps=None, epochs=16, quick=False,
                                 out="x/result.json")  # fmt: skip
    plan = rs.plan_from(args)
    assert plan.workloads["small-cnn"].epochs == 16
    assert plan.workloads["small-cnn"].dataset_size == rs.WORKLOADS["small-cnn"].dataset_size
    assert rs.main(["--epochs", "0", "--workloads", "small-cnn"]) == 2
    assert "--epochs must be at least 1" in capsys.readouterr().err
