"""The error hierarchy's field: named where an error is raised, read by the API and the CLI."""

import pickle

import pytest

from rightsize.core.errors import ResourceError, SpecError, UnknownNameError, unknown_name


def test_a_field_is_printed_before_the_reason_and_kept_apart():
    error = SpecError("4 cores is more than the service's capacity of 2", field="budget.cpu")
    assert str(error) == "budget.cpu: 4 cores is more than the service's capacity of 2"
    assert error.field == "budget.cpu"
    assert error.reason == "4 cores is more than the service's capacity of 2"


def test_an_error_without_a_field_reads_as_its_message():
    error = ResourceError("the launch shape cannot run")
    assert error.field is None and str(error) == error.reason == "the launch shape cannot run"


@pytest.mark.parametrize("error", [SpecError("bad", field="trace_csv"),
                                   UnknownNameError("unknown workload 'x'", field="workload")])
def test_the_field_survives_a_trip_between_processes(error):
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error) and back.field == error.field and str(back) == str(error)


def test_an_unknown_name_is_not_quoted_like_a_key_error():
    error = unknown_name("workload", "mlp", ["mlp3", "resnet18"])
    assert str(error) == "unknown workload 'mlp'; did you mean 'mlp3'?"
