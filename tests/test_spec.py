from pathlib import Path

import pytest

from rightsize.core.errors import SpecError
from rightsize.core.spec import Objective, Strategy, load_job_spec, parse_job_spec

GOOD = """
name: wdl
workload: wide-deep
dataset: synthetic-criteo
batch_size: 512
epochs: 2
strategy: ps
budget: {cpu: 8, memory: 16Gi}
initial_shape:
  ps: {count: 1, cpu: 1, memory: 2Gi}
  workers: {count: 2, cpu: 2, memory: 2Gi}
checkpoint: {dir: /tmp/ckpt, interval: 30s}
constraints: {deadline: 1h30m, budget: $30}
objective: cost
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(text)
    return path


def test_loads_a_full_job_spec(tmp_path):
    spec = load_job_spec(write(tmp_path, GOOD))
    assert spec.workload == "wide-deep" and spec.batch_size == 512
    assert spec.budget.resources.cpu_cores == 8 and spec.budget.memory == 16 * 2**30
    assert spec.strategy is Strategy.PS and spec.objective is Objective.COST
    assert spec.constraints.deadline_s == 5400 and spec.constraints.budget_usd == 30
    assert spec.checkpoint.interval_s == 30
    shape = spec.initial_shape.to_shape()
    assert (shape.n_ps, shape.n_workers, shape.total().cpu_cores) == (1, 2, 5)
    assert spec.length == ("epochs", 2)


def test_defaults():
    spec = parse_job_spec(
        {"workload": "mlp3", "batch_size": 32, "budget": {"cpu": 2, "memory": "1Gi"}}
    )
    assert spec.initial_shape == "auto" and spec.length == ("epochs", 1)
    assert spec.constraints.deadline_s is None and spec.objective is Objective.TIME


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (GOOD.replace("batch_size: 512", ""), "batch_size: required field is missing"),
        (GOOD.replace("memory: 16Gi}", "memory: 16XB}"), "budget.memory: memory '16XB'"),
        (GOOD.replace("cpu: 8,", "cpu: eight,"), "budget.cpu: cpu 'eight'"),
    ],
)
def test_field_level_errors_name_the_file_and_field(tmp_path, text, message):
    with pytest.raises(SpecError) as info:
        load_job_spec(write(tmp_path, text))
    assert message in str(info.value)
    assert str(info.value).startswith(str(tmp_path / "job.yaml"))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            GOOD.replace("strategy: ps", "strategy: ring"),
            "strategy: Input should be 'ps' or 'allreduce'",
        ),
        (
            GOOD.replace("batch_size:", "batchsize:"),
            "batchsize: unknown field (did you mean 'batch_size'?)",
        ),
        (
            GOOD.replace("cpu: 2, memory: 2Gi}", "cpu: 2, memroy: 2Gi}"),
            "initial_shape.workers.memroy: unknown field",
        ),
        (GOOD.replace("cpu: 8,", "cpu: 4,"), "initial_shape needs 5 cpu"),
        (GOOD.replace("epochs: 2", "epochs: 2\nsteps: 10"), "either epochs or steps"),
        (
            GOOD.replace("batch_size: 512", "batch_size: 0"),
            "batch_size: Input should be greater than or equal to 1",
        ),
        ("workload: [unclosed", "line 1"),
        ("- just\n- a list\n", "expected a mapping"),
    ],
)
def test_malformed_job_files(tmp_path, text, message):
    with pytest.raises(SpecError) as info:
        load_job_spec(write(tmp_path, text))
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_unreadable_file():
    with pytest.raises(SpecError, match="cannot read"):
        load_job_spec("/nonexistent/job.yaml")
