"""``rightsize run``: every field documented in --help; bad inputs fail in one line, exit 2,
leaving nothing behind."""

from pathlib import Path

import pytest

from rightsize.cli.main import main
from rightsize.core.spec import JobSpec, _walk_fields

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
