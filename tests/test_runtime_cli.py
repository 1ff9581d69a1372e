"""``rightsize run``: every field documented in --help; bad inputs fail in one line, exit 2,
leaving nothing behind."""

from pathlib import Path

import numpy as np
import pytest

from rightsize.cli.main import main
from rightsize.core.spec import JobSpec, _walk_fields
from rightsize.runtime.accounting import count_log
from rightsize.runtime.errors import ExactlyOnceViolated
from rightsize.runtime.master import Master
from rightsize.runtime.report import violations

JOB = """
name: cli
workload: mlp3
dataset: digits
batch_size: 64
epochs: 1
strategy: ps
budget: {{cpu: 2, memory: 4Gi}}
initial_shape:
  ps: {{count: 1, cpu: 0.5, memory: 1Gi}}
  workers: {{count: 1, cpu: 1, memory: 1Gi}}
checkpoint: {{dir: {ckpt}}}
"""


def write_job(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(text.format(ckpt=tmp_path / "ckpt"))
    return path


def run(capsys, *argv):
    code = main(["run", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def test_help_documents_every_job_field(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = capsys.readouterr().out
    for path, _, info in _walk_fields(JobSpec):
        assert path in out and info.description and info.description[:20] in out


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: t.replace("batch_size: 64", "batch_size: [64"), "line"),
        (lambda t: t.replace("cpu: 2, memory: 4Gi", "cpu: 1, memory: 4Gi"), "initial_shape needs"),
        (lambda t: t.replace("strategy: ps", "strategy: ring"), "strategy: Input should be"),
        (lambda t: t.replace("workload: mlp3", "workload: mlp4"), "did you mean 'mlp3'"),
        (lambda t: t + "policy: {name: statik}\n", "did you mean 'static'"),
        (lambda t: t.replace("strategy: ps", "strategy: allreduce"), "remove initial_shape.ps"),
        (lambda t: t + "training: {optimizer: lbfgs}\n", "training.optimizer"),
    ],
)
def test_bad_job_files_fail_in_one_line_and_write_nothing(tmp_path, capsys, edit, message):
    job = tmp_path / "job.yaml"
    job.write_text(edit(JOB.format(ckpt=tmp_path / "ckpt")))
    code, out, err = run(capsys, job)
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "ckpt").exists()


def test_unwritable_checkpoint_directory(tmp_path, capsys):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where a directory should be")
    job = tmp_path / "job.yaml"
    job.write_text(JOB.format(ckpt=blocker / "ckpt"))
    code, _, err = run(capsys, job)
    assert code == 2 and err.count("\n") == 1
    assert "checkpoint.dir: cannot write to" in err and "choose a writable directory" in err


def test_missing_file_and_bad_flag(tmp_path, capsys):
    code, _, err = run(capsys, tmp_path / "nope.yaml")
    assert code == 2 and "cannot read" in err
    code, _, err = run(capsys, write_job(tmp_path, JOB), "--policy", "nearchuss")
    assert code == 2 and "unknown policy" in err


def test_a_failed_exactly_once_check_exits_1_naming_epochs_and_samples(tmp_path, capsys,
                                                                       monkeypatch):  # fmt: skip
    # the accounting of a job whose servers applied epoch 0 once and nothing of epoch 1
    log = [((0, 0, 0), np.arange(0, 40)), ((0, 1, 0), np.arange(40, 64))]
    tally = count_log(log, 64, expected_epochs=2)
    assert [e.epoch for e in tally.epochs] == [0, 1]  # the empty epoch has a row
    assert (tally.epochs[1].applied, tally.epochs[1].missing) == (0, 64)
    holder = {"exactly_once": False, "problems": [1], **tally.to_dict()}
    report = {"accounting": {"checked": True, "checkpoint": 3, "complete_epochs": 2,
                             "holders": {"ps-0/group0": holder}}}
    problems = violations(report)
    assert problems == ["ps-0/group0 epoch 1: 64 of 64 samples never applied"]

    def fails(self):
        raise ExactlyOnceViolated("exactly-once check failed: " + "; ".join(problems), {
            **report, "job": "cli", "workload": "mlp3", "dataset": "digits", "strategy": "ps",
            "policy": "static", "isolation": "cgroup-v1", "steps": 2, "samples": 64, "epochs": 1,
            "wall_time_s": 1.0, "timeline": [], "restarts": {"nodes": {}, "masters": 0}})

    monkeypatch.setattr(Master, "run", fails)
    code, out, err = run(capsys, write_job(tmp_path, JOB), "--report", tmp_path / "r.json")
    assert code == 1 and err.count("\n") == 1, err
    assert err.startswith("error: exactly-once check failed: ps-0/group0 epoch 1: 64 of 64")
    assert "every sample trained exactly once per epoch: NO" in out
    assert (tmp_path / "r.json").exists()  # the report is kept for the post-mortem


def test_a_job_larger_than_this_machine_is_refused_before_it_starts(tmp_path, capsys):
    text = JOB.replace("cpu: 2, memory: 4Gi", "cpu: 64, memory: 4Gi").replace(
        "workers: {{count: 1, cpu: 1, memory: 1Gi}}", "workers: {{count: 1, cpu: 16, memory: 1Gi}}")
    code, _, err = run(capsys, write_job(tmp_path, text))
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "node worker-0 asks for 16 CPU but this machine has" in err and "--oversubscribe" in err
    assert not (tmp_path / "ckpt").exists()  # refused before anything was written


def test_a_ray_cluster_that_cannot_be_joined_fails_in_one_line(tmp_path, capsys):
    # a port nothing listens on: refused at once (Ray itself would retry for minutes); or,
    # where Ray is not installed, the extra to install named
    code, _, err = run(capsys, write_job(tmp_path, JOB), "--backend", "ray", "--ray-address",
                       "127.0.0.1:1")  # fmt: skip
    assert code == 2 and err.count("\n") == 1, err
    assert "no Ray head answers there" in err or "pip install 'rightsize[ray]'" in err
    assert not (tmp_path / "ckpt").exists()
    code, _, err = run(capsys, write_job(tmp_path, JOB), "--backend", "kubernetes")
    assert code == 2 and "invalid choice" in err
