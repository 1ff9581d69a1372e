"""Issue 40 item 3: the precision a plan or prediction assumes is stated, and the plan's
TF32 and AMP alternatives are shown when they change its time or cost by more than 20%."""

import json

import pytest

from profile_factory import linear_profile
from rightsize.core.catalog import find_accelerator
from rightsize.perf.precision import Precision
from rightsize.planning.plan import CloudPlan, Config, Slot
from rightsize.planning.precision_alternatives import SHOWN_ABOVE, compared, worth_showing
from rightsize.planning.precision_terms import CONTAINERS_HINT, PIP_DEFAULT, precision_statement
from test_cli import assert_one_line_error, run

DEFAULT_ON_AMPERE = ("fp32 matmuls, TF32 convolutions — PyTorch's pip default; "
                     "NVIDIA containers use TF32: --precision tf32")  # fmt: skip


@pytest.fixture(scope="module")
def profile_file(tmp_path_factory):
    return str(linear_profile().save(tmp_path_factory.mktemp("p") / "toy.json"))


def plan_args(profile_file, instances, *extra, cloud="srift-2020"):
    return ["plan", "--profile", profile_file, "--global-batch", "512", "--iterations", "1000",
            "--cloud", cloud, "--instances", instances, "--quiet", *extra]  # fmt: skip


# -- the statement ------------------------------------------------------------------------


def test_the_default_on_ampere_and_later_is_the_issues_sentence():
    statement = precision_statement(Precision.PYTORCH, [find_accelerator("A100")])
    assert statement.text == DEFAULT_ON_AMPERE
    assert statement.line().startswith("precision pytorch (the default): ")


@pytest.mark.parametrize("gpu", ["V100", "T4", "K80"])
def test_the_default_before_ampere_claims_no_tf32(gpu):
    text = precision_statement(Precision.PYTORCH, [find_accelerator(gpu)]).text
    assert "TF32 convolutions" not in text and CONTAINERS_HINT not in text
    assert f"{gpu} has no TF32" in text and PIP_DEFAULT in text


def test_a_mix_of_generations_names_the_gpus_without_tf32():
    text = precision_statement(Precision.PYTORCH,
                               [find_accelerator(n) for n in ("A10G", "V100", "T4")]).text  # fmt: skip
    assert text.startswith("fp32 matmuls, TF32 convolutions (fp32 on T4, V100: no TF32)")
    assert text.endswith(CONTAINERS_HINT)


def test_tf32_and_amp_say_where_they_change_nothing():
    assert "(fp32 on V100: no TF32)" in precision_statement(
        Precision.TF32, [find_accelerator("A100"), find_accelerator("V100")]).text
    assert "K80 has no faster fp16" in precision_statement(
        Precision.AMP, [find_accelerator("K80"), find_accelerator("T4")]).text
    assert "no faster fp16" not in precision_statement(Precision.AMP,
                                                       [find_accelerator("T4")]).text
    assert precision_statement(Precision.PYTORCH, []).text.startswith("not used")


def test_plan_states_the_precision_in_text_and_in_every_json_plan(capsys, profile_file):
    code, out, _ = run(capsys, *plan_args(profile_file, "p4d.24xlarge:2", cloud="aws"))
    assert code == 0
    assert out.splitlines()[1] == f"precision pytorch (the default): {DEFAULT_ON_AMPERE}"
    code, out, _ = run(capsys, *plan_args(profile_file, "p4d.24xlarge:2", "--json", cloud="aws"))
    rows = json.loads(out)
    assert code == 0 and rows
    for row in rows:
        assert row["precision"] == {"precision": "pytorch", "default": True,
                                    "assumes": DEFAULT_ON_AMPERE}  # fmt: skip


@pytest.mark.parametrize("device", [["--device", "A100"], ["--instance", "aws:p3.2xlarge"]])
def test_predict_on_a_gpu_states_the_precision(capsys, profile_file, device):
    code, out, _ = run(capsys, "predict", profile_file, *device, "--batch", "64")
    gpu = "A100" if device[1] == "A100" else "V100"
    expected = precision_statement(Precision.PYTORCH, [find_accelerator(gpu)])
    assert code == 0 and expected.line() in out.splitlines()
    code, out, _ = run(capsys, "predict", profile_file, *device, "--batch", "64", "--json")
    assert json.loads(out)["precision_assumed"] == expected.to_dict()


@pytest.mark.parametrize("command", [
    ["plan", "--global-batch", "8", "--iterations", "1"],
    ["predict", "p.json", "--device", "A100"],
])  # fmt: skip
def test_a_bad_precision_is_one_line_and_exit_2(capsys, command):
    code, _, err = run(capsys, *command, "--precision", "fp8")
    assert_one_line_error(code, err, "argument --precision: invalid choice: 'fp8'")


# -- the alternatives ---------------------------------------------------------------------


def _plan(seconds_per_iter: float, price_per_hour: float) -> CloudPlan:
    return CloudPlan(Config((Slot("g4dn.xlarge", 1, 64),)), seconds_per_iter, 1000,
                     price_per_hour, "srift")  # fmt: skip


@pytest.mark.parametrize(("seconds", "price", "shown"), [
    (1.0, 1.0, False),  # the same plan
    (1 - SHOWN_ABOVE + 0.01, 1.0, False),  # 19% faster and cheaper: not worth a line
    (1 - SHOWN_ABOVE - 0.01, 1.0, True),  # 21% faster
    (1.0, 1 + SHOWN_ABOVE + 0.01, True),  # as fast, 21% dearer
    (0.5, 2.0, True),  # twice as fast on VMs twice the price: same cost, half the time
])  # fmt: skip
def test_an_alternative_is_shown_beyond_the_threshold_only(seconds, price, shown):
    alternative = compared(Precision.AMP, _plan(seconds, price), _plan(1.0, 1.0))
    assert worth_showing(alternative) is shown


def test_plan_shows_amp_on_t4_and_not_tf32_which_t4_lacks(capsys, profile_file):
    # the toy profile's FLOPs are matmuls: fp32 at the default, fp16 tensor cores at AMP
    code, out, _ = run(capsys, *plan_args(profile_file, "g4dn.8xlarge:4"))
    assert code == 0
    table = out.split("at another precision")[1]
    assert "--precision amp" in table and "--precision tf32" not in table
    code, out, _ = run(capsys, *plan_args(profile_file, "g4dn.8xlarge:4", "--json"))
    (amp,) = json.loads(out)[0]["precision_alternatives"]
    chosen = json.loads(out)[0]
    assert amp["precision"] == "amp" and amp["plan"]["total_seconds"] < chosen["total_seconds"]
    assert amp["total_seconds_change"] < -SHOWN_ABOVE


def test_plan_shows_no_alternative_where_precision_changes_little(capsys, profile_file):
    # M60s have neither TF32 nor faster fp16: every precision plans the same within 20%
    code, out, _ = run(capsys, *plan_args(profile_file, "g3.8xlarge:4"))
    assert code == 0 and "at another precision" not in out
    code, out, _ = run(capsys, *plan_args(profile_file, "g3.8xlarge:4", "--json"))
    assert json.loads(out)[0]["precision_alternatives"] == []


def test_plan_at_amp_shows_tf32_when_it_is_slower(capsys, profile_file):
    # chosen at AMP on A100s, the TF32 plan is the slower alternative, AMP is not repeated
    code, out, _ = run(capsys, *plan_args(profile_file, "p4d.24xlarge:2", "--precision", "amp",
                                          "--json", cloud="aws"))  # fmt: skip
    alternatives = json.loads(out)[0]["precision_alternatives"]
    assert [a["precision"] for a in alternatives] == ["tf32"]
    assert alternatives[0]["total_seconds_change"] > SHOWN_ABOVE


def test_fc2_plans_state_the_precision_and_plan_no_alternatives(capsys, profile_file):
    code, out, _ = run(capsys, "plan", "--profile", profile_file, "--strategy", "ps",
                       "--global-batch", "64", "--iterations", "1000", "--cloud", "fc2-2018",
                       "--instances", "g3.4xlarge,p2.xlarge", "--budget-per-hour", "10",
                       "--quiet", "--json")  # fmt: skip
    rows = json.loads(out)
    assert code == 0 and rows
    expected = precision_statement(Precision.PYTORCH,
                                   [find_accelerator("M60"), find_accelerator("K80")])  # fmt: skip
    for row in rows:
        assert row["precision"] == expected.to_dict() and "precision_alternatives" not in row
